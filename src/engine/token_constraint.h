#pragma once
// A per-sequence restriction of which token may come next (grammar-constrained decoding). The
// engine asks it to mask the logits row before sampling and tells it each token it appends.
// Implementations live outside the engine (structured/), the engine knows only this interface.

#include <cstdint>
#include <functional>
#include <memory>
#include <span>

namespace ls {

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets the logits of tokens that may not come next to -inf. `logits` is [vocab] f32.
  virtual void mask_logits(std::span<float> logits) = 0;
  // Records the sampled token. False when the constraint does not allow it (the engine then ends
  // the sequence with an error): only possible when masking left no token at all.
  virtual bool accept(int32_t token) = 0;
};

// Makes one constraint per choice of a request (called on the engine thread).
using TokenConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

}  // namespace ls
