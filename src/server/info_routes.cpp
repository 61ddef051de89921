// GET /v1/models, /health, /metrics and POST /tokenize, /detokenize: the small endpoints,
// with vLLM's response shapes.

#include <memory>
#include <mutex>
#include <string>

#include "core/clock.h"
#include "server/server_impl.h"
#include "tokenizer/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace ls {

namespace {

// POST /tokenize {prompt | messages, add_special_tokens, add_generation_prompt,
// return_token_strs} → {count, max_model_len, tokens, token_strs}.
void handle_tokenize(const Server::Impl& impl, const HttpRequest& req, HttpResponse& res) {
  Result<Json> body = parse_json_object(req.body);
  if (!body.ok()) return send_status_error(res, body.status());
  if (Status status = check_model_name(*body, impl.request_context); !status.ok()) {
    return send_status_error(res, status);
  }
  std::vector<int32_t> tokens;
  if (find_field(*body, "messages") != nullptr) {
    // Chat input: no special tokens by default, the template emits them (vLLM's default too).
    Result<std::vector<int32_t>> ids =
        tokenize_chat(*body, /*default_add_special_tokens=*/false, impl.request_context);
    if (!ids.ok()) return send_status_error(res, ids.status());
    tokens = std::move(ids).value();
  } else {
    std::optional<std::string> prompt;
    if (Status status = read_string(*body, "prompt", &prompt); !status.ok()) {
      return send_status_error(res, status);
    }
    if (!prompt)
      return send_status_error(res, invalid_argument("'prompt' or 'messages' is required"));
    bool add_special_tokens = true;
    if (Status status = read_bool(*body, "add_special_tokens", &add_special_tokens); !status.ok()) {
      return send_status_error(res, status);
    }
    tokens = impl.tokenizer->encode(*prompt, add_special_tokens);
  }
  bool return_token_strs = false;
  if (Status status = read_bool(*body, "return_token_strs", &return_token_strs); !status.ok()) {
    return send_status_error(res, status);
  }
  Json token_strs = nullptr;
  if (return_token_strs) {
    token_strs = Json::array();
    for (int32_t id : tokens) token_strs.push_back(impl.tokenizer->id_to_token(id));
  }
  Json out = {{"count", tokens.size()},
              {"max_model_len", impl.engine->max_model_len()},
              {"tokens", tokens},
              {"token_strs", std::move(token_strs)}};
  send_json(res, dump_json(out));
}

// POST /detokenize {tokens} → {prompt}.
void handle_detokenize(const Server::Impl& impl, const HttpRequest& req, HttpResponse& res) {
  Result<Json> body = parse_json_object(req.body);
  if (!body.ok()) return send_status_error(res, body.status());
  if (Status status = check_model_name(*body, impl.request_context); !status.ok()) {
    return send_status_error(res, status);
  }
  if (find_field(*body, "tokens") == nullptr) {
    return send_status_error(res, invalid_argument("'tokens' is required"));
  }
  std::vector<int64_t> ids;
  if (Status status = read_int_list(*body, "tokens", &ids); !status.ok()) {
    return send_status_error(res, status);
  }
  const int64_t vocab_size = impl.tokenizer->vocab_size();
  std::vector<int32_t> tokens;
  tokens.reserve(ids.size());
  for (int64_t id : ids) {
    if (id < 0 || id >= vocab_size) {
      return send_status_error(
          res, invalid_argument("Token id {} is out of vocabulary [0, {})", id, vocab_size));
    }
    tokens.push_back(static_cast<int32_t>(id));
  }
  const std::string text = impl.tokenizer->decode(tokens, /*skip_special_tokens=*/false);
  send_json(res, dump_json(Json{{"prompt", text}}));
}

// GET /tokenizer_info: vLLM's shape (tokenizer_config.json's fields, tokenizer_class,
// chat_template), plus "tokenizer_json", the whole tokenizer.json, so that a client such as
// `longserve bench serve` can rebuild the exact tokenizer without the model files.
std::string tokenizer_info_body(const Server::Impl& impl) {
  const Tokenizer& tokenizer = *impl.tokenizer;
  Json out = Json::object();
  if (!tokenizer.source_config_json().empty()) {
    Json config = Json::parse(tokenizer.source_config_json(), nullptr, false);
    if (config.is_object()) {
      for (auto& [key, value] : config.items()) {
        // vLLM leaves out the per-id table of added tokens; tokenizer_json has it.
        if (key != "added_tokens_decoder") out[key] = value;
      }
    }
  }
  out["tokenizer_class"] = "PreTrainedTokenizerFast";
  if (impl.chat_template != nullptr) out["chat_template"] = impl.chat_template->source();
  Json tokenizer_json = Json::parse(tokenizer.source_json(), nullptr, false);
  if (!tokenizer_json.is_discarded()) out["tokenizer_json"] = std::move(tokenizer_json);
  return dump_json(out);
}

}  // namespace

void Server::Impl::install_info_routes() {
  const int64_t created = unix_time_seconds();
  // 503 while draining or stopping, and for good once the engine is down (a tensor-parallel rank
  // failed: docs/tensor-parallel.md), with the engine's error as the body (as vLLM answers 503
  // when its engine is dead), so a load balancer takes the server out.
  auto health = [this](HttpResponse& res) {
    const std::string down = engine->stats().engine_error;
    res.status = stopping || draining || !down.empty() ? 503 : 200;
    if (!down.empty()) send_error(res, make_api_error(503, down));
  };
  router.add("GET", "/health", [health](HttpRequest&, HttpResponse& res) { health(res); });
  // SageMaker's health probe, as vLLM serves it (GET and POST).
  for (const char* method : {"GET", "POST"}) {
    router.add(method, "/ping", [health](HttpRequest&, HttpResponse& res) { health(res); });
  }
  router.add("GET", "/version", [](HttpRequest&, HttpResponse& res) {
    send_json(res, dump_json(Json{{"version", LONGSERVE_VERSION}}));
  });
  // vLLM's server load: generation requests in flight (one per prompt of a request).
  router.add("GET", "/load", [this](HttpRequest&, HttpResponse& res) {
    send_json(res, dump_json(Json{{"server_load", live.snapshot().size()}}));
  });
  auto tokenizer_info = std::make_shared<std::string>();
  auto tokenizer_info_once = std::make_shared<std::once_flag>();
  router.add("GET", "/tokenizer_info",
             [this, tokenizer_info, tokenizer_info_once](HttpRequest&, HttpResponse& res) {
               std::call_once(*tokenizer_info_once,
                              [&] { *tokenizer_info = tokenizer_info_body(*this); });
               send_json(res, *tokenizer_info);
             });
  router.add("GET", "/v1/models", [this, created](HttpRequest&, HttpResponse& res) {
    Json model = {{"id", config.served_model_name},
                  {"object", "model"},
                  {"created", created},
                  {"owned_by", "longserve"},
                  {"root", engine->model_name()},
                  {"parent", nullptr},
                  {"max_model_len", engine->max_model_len()}};
    send_json(res, dump_json(Json{{"object", "list"}, {"data", Json::array({std::move(model)})}}));
  });
  router.add("GET", "/metrics", [this](HttpRequest&, HttpResponse& res) {
    res.set_content(metrics->render(engine->stats()), "text/plain; version=0.0.4; charset=utf-8");
  });
  router.add("POST", "/tokenize", [this](HttpRequest& req, HttpResponse& res) {
    handle_tokenize(*this, req, res);
  });
  router.add("POST", "/detokenize", [this](HttpRequest& req, HttpResponse& res) {
    handle_detokenize(*this, req, res);
  });
}

}  // namespace ls
