// HF added tokens (tokenizer.json "added_tokens"): strings matched in the input before pre-tokenization and mapped
// straight to their ids. As in HF: tokens with "normalized": false are matched in the raw text, the others in each
// normalized piece (their content normalized first); matching is leftmost-longest and non-overlapping;
// single_word drops a match glued to a word character; lstrip/rstrip absorb the whitespace on that side.
#pragma once
#include <algorithm>
#include <cstdint>
#include <iterator>
#include <string>
#include <string_view>
#include <vector>

namespace hlm {

struct AddedToken {
  int32_t id = -1;
  std::string content;
  bool special = false, single_word = false, lstrip = false, rstrip = false, normalized = true;
};

// One segment of split text: an added token's id, or -1 for text left to the pre-tokenizer and model.
struct AddedTokenSegment {
  int32_t id;
  size_t begin, end;  // byte offsets into the split text
};

// Leftmost-longest matcher over a set of patterns (a byte trie), with the flags of the token each pattern stands for.
class AddedTokenMatcher {
 public:
  AddedTokenMatcher() { std::fill(std::begin(root_children_), std::end(root_children_), -1); }
  // patterns[i] is what is searched for token tokens[i] (its content, or its normalized content).
  void build(const std::vector<AddedToken>& tokens, const std::vector<std::string>& patterns);
  bool empty() const { return nodes_.size() <= 1; }

  // Segments covering all of `text` (valid UTF-8) in order; appended to `out`.
  void split(std::string_view text, std::vector<AddedTokenSegment>& out) const;

 private:
  struct Node {
    std::vector<std::pair<unsigned char, int32_t>> children;  // sorted by byte
    int32_t token = -1;                                       // index into tokens_ of a pattern ending here
  };
  int32_t child(int32_t node, unsigned char byte) const;
  std::vector<Node> nodes_{Node{}};
  int32_t root_children_[256];  // child of the root per first byte (-1: none): most positions stop here
  std::vector<AddedToken> tokens_;
};

}  // namespace hlm
