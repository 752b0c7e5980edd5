#pragma once
// A vision-language model's token embeddings: each image token's embedding replaced by its row
// of the image features, the other tokens' kept.
#include <cstdint>

#include <meganeura/causal_lm.h>

namespace mn::models {

// features [rows, hidden]; image_rows i32 [batch, tokens]: the row of each image token (any
// valid row for the others).
EmbeddingSplice image_splice(Tensor features, Tensor image_rows, int64_t image_token);

}  // namespace mn::models
