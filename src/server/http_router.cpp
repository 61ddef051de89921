#include "server/http_router.h"

namespace ls {

void HttpRouter::add(std::string method, std::string path, HttpHandler handler) {
  routes_.push_back(Route{std::move(method), std::move(path), std::move(handler)});
}

bool HttpRouter::dispatch(HttpRequest& req, HttpResponse& res) const {
  std::string allow;
  for (const Route& route : routes_) {
    if (route.path != req.path) continue;
    // HEAD runs the GET handler; the transport sends its head without the body.
    if (route.method == req.method || (req.method == "HEAD" && route.method == "GET")) {
      route.handler(req, res);
      return true;
    }
    allow += allow.empty() ? route.method : ", " + route.method;
    if (route.method == "GET") allow += ", HEAD";
  }
  if (allow.empty()) {
    res.status = 404;
  } else {
    res.status = 405;
    res.headers.emplace_back("Allow", allow);
  }
  return false;
}

}  // namespace ls
