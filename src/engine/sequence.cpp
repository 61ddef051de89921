#include "engine/sequence.h"

#include <algorithm>

namespace ls {

Sequence::Sequence(std::shared_ptr<RequestState> req, int32_t choice, uint64_t seed,
                   const Tokenizer* tokenizer, int32_t max_out)
    : request(std::move(req)),
      index(choice),
      max_output_tokens(std::min(request->stop.max_tokens, max_out)),
      sampling(request->sampling, seed, request->prompt_ids),
      stop(request->stop, max_out) {
  if (request->stop.min_tokens > 0) {
    sampling.forbid_until(min_tokens_forbidden_ids(request->stop), request->stop.min_tokens);
  }
  if (tokenizer != nullptr) {
    detokenizer = std::make_unique<IncrementalDetokenizer>(
        *tokenizer, request->stop.skip_special_tokens, request->prompt_ids);
  }
}

}  // namespace ls
