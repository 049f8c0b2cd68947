// Structured output: a per-sequence rule on which tokens may come next (OpenAI's response_format).
// The engine applies it as a mask until the constraint is released: as bits sent down with the
// row's sampling request where the backend samples, or on the host to a row that came back. With
// speculative drafts, each row is masked in the state the drafts before it lead to, so a draft the
// mask refuses is never the token chosen.
#ifndef AUTOGLM_RUNTIME_CONSTRAINT_H_
#define AUTOGLM_RUNTIME_CONSTRAINT_H_

#include <cmath>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

namespace ag::runtime {

// A mask as bits, a bit an id: the words over `vocab` ids, and whether `id`'s bit is set.
inline size_t AllowedWords(int64_t vocab) { return static_cast<size_t>((vocab + 63) / 64); }
inline bool IsAllowed(std::span<const uint64_t> allowed, int64_t id) {
  return ((allowed[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) != 0;
}

class TokenConstraint {
 public:
  virtual ~TokenConstraint() = default;
  // Sets to -inf the logits (`n` of them, ids 0 .. n-1) of every token that may not come next. The
  // end-of-sequence and stop ids are the engine's: it lets them through exactly when Complete().
  virtual void Mask(float* logits, int64_t n) = 0;
  // Moves past a chosen token; false if the token was not allowed (Mask left it -inf).
  virtual bool Accept(int32_t token) = 0;
  // Whether the text so far is a whole answer (the sequence may end, and nothing else may come).
  virtual bool Complete() const = 0;
  // Works out now what Mask will need next: the current state's mask and, for a step with speculative
  // drafts, those of the states the drafts lead to (while Accept takes exactly those tokens). The
  // engine calls it while the device runs the step, so a state met for the first time (a schema's
  // mask is up to ~10 ms of host time) costs no time of its own. Optional: Mask works without it.
  virtual void Prepare(std::span<const int32_t> drafts) { (void)drafts; }
  // Whether the constraint has nothing more to say: every token may come from here on, for good,
  // and the sequence may end anywhere (an optional tool call the reply did not start with). The
  // engine then drops it, and the sequence samples where its logits are again.
  virtual bool Released() const { return false; }
  // The same rule as bits, for a mask applied where the logits are (the engine adds its end ids):
  // bit i of `bits`, (n + 63) / 64 words, set when token i may come next. By default read off Mask.
  virtual void Allowed(std::vector<uint64_t>* bits, int64_t n) {
    std::vector<float> row(static_cast<size_t>(n), 0.0f);
    Mask(row.data(), n);
    bits->assign(AllowedWords(n), 0);
    for (int64_t i = 0; i < n; ++i) {
      if (row[static_cast<size_t>(i)] != -INFINITY) (*bits)[static_cast<size_t>(i) / 64] |= uint64_t{1} << (i % 64);
    }
  }
  // For a step with drafts masked where the logits are: whether the constraint keeps the states
  // Prepare's drafts lead to, and Allowed's bits and Complete() of the one the first k (>= 1) of
  // them lead to. Past a draft the constraint refuses any answer does (those rows are never used:
  // the token chosen there is not the draft). Without them the engine masks such a step on the host.
  virtual bool KeepsDraftStates() const { return false; }
  virtual void AllowedAfter(size_t k, std::vector<uint64_t>* bits, int64_t n, bool* complete) {
    (void)k;
    Allowed(bits, n);
    *complete = Complete();
  }
};

// Makes one sequence's constraint (each of a request's n choices gets its own).
using ConstraintFactory = std::function<std::unique_ptr<TokenConstraint>()>;

}  // namespace ag::runtime

#endif  // AUTOGLM_RUNTIME_CONSTRAINT_H_
