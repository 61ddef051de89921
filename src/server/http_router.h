#pragma once
// Method + exact path → handler. An unknown path gets 404; a known path with another method gets
// 405 and an Allow header (vLLM answers GET /v1/completions with 405 too). HEAD is served by
// the GET route, as Starlette (vLLM's server) does.

#include <functional>
#include <string>
#include <vector>

#include "server/http_message.h"

namespace ls {

using HttpHandler = std::function<void(HttpRequest&, HttpResponse&)>;

class HttpRouter {
 public:
  void add(std::string method, std::string path, HttpHandler handler);
  // Runs the matching handler; false (with res.status 404 or 405 set) when none matches.
  bool dispatch(HttpRequest& req, HttpResponse& res) const;

 private:
  struct Route {
    std::string method;
    std::string path;
    HttpHandler handler;
  };
  std::vector<Route> routes_;
};

}  // namespace ls
