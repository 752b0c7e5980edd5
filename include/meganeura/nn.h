#pragma once
// Modules in PyTorch's layout. A module declares its parameters and buffers (name, shape, dtype,
// initializer) when constructed and adds ops to a graph when its forward() is called; the graph
// tensors are named by the module's place in its tree exactly as PyTorch's state_dict keys
// ("layers.0.weight", "bn.running_mean", "bn.num_batches_tracked"), so weights move between
// PyTorch and a Session by name.
//
//   auto net = std::make_shared<mn::nn::Sequential>();
//   net->push_back(std::make_shared<mn::nn::Linear>(784, 128));
//   net->push_back(std::make_shared<mn::nn::ReLU>());
//   net->push_back(std::make_shared<mn::nn::Linear>(128, 10));
//   mn::Graph g;
//   g.output("logits", net->forward(g.input("x", {64, 784})));
//   auto session = mn::build_session(g);
//   mn::nn::load_state_dict(*net, *session, "model.safetensors");  // written by PyTorch
//
// Training or evaluation mode (train(), eval()) is read when forward() builds the graph, as the
// graph is compiled once: a training graph and an evaluation graph are two graphs built from
// the same module in each mode (sharing weights by name in one multi-program session, or copied
// through state_dict).
#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <meganeura/data.h>
#include <meganeura/graph.h>

namespace mn {
class Session;
}

namespace mn::nn {

// A parameter or buffer a module declares.
struct Slot {
  std::string name;  // local name ("weight", "running_mean")
  TensorType type;
  Init init;
  bool buffer = false;  // a graph state: not trained, changed by the module's forward
  // How the tensor is stored in a state_dict file: PyTorch's dtype (num_batches_tracked is I64
  // there, an i32 state here).
  ElemType file_type = ElemType::f32;
};

// A slot with its key relative to the module whose state_dict it belongs to and the name of its
// graph tensor (the key relative to the root of the tree).
struct StateEntry {
  std::string key;
  std::string graph_name;
  Slot slot;
};

class Module {
 public:
  explicit Module(std::string kind) : kind_(std::move(kind)) {}
  virtual ~Module() = default;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;

  // The PyTorch class this module stands for ("Linear", "BatchNorm2d").
  const std::string& kind() const { return kind_; }
  // The dotted path from the root ("" for the root itself), e.g. "layers.0".
  std::string path() const;
  // "Linear 'layers.0'" for error messages.
  std::string where() const;

  // One-input forward (Sequential calls it). mn::Error for modules that take other inputs.
  virtual Tensor forward(Tensor x);
  Tensor operator()(Tensor x) { return forward(x); }

  // Training mode (the default) or evaluation, for this module and every descendant.
  Module& train(bool on = true);
  Module& eval() { return train(false); }
  bool training() const { return training_; }

  // The seed of the initializers of the whole tree (set on any module, kept by the root): each
  // parameter draws from (seed, its graph name), so values do not depend on build order.
  Module& seed(uint64_t s);
  uint64_t seed() const;

  // PyTorch's order: own parameters and buffers, then each child's, recursively.
  std::vector<StateEntry> state_entries() const;
  std::vector<StateEntry> named_parameters() const;
  std::vector<StateEntry> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& named_children() const {
    return children_;
  }
  // A direct child by name; mn::Error naming this module and the name when there is none.
  std::shared_ptr<Module> child(const std::string& name) const;

  // Replaces the initializer of this module's parameter or buffer `name`, as torch.nn.init's
  // functions do to a tensor (a random one still draws from the tree's seed and the tensor's
  // name). It applies to graphs built after the call. mn::Error for an unknown name.
  void reset_init(const std::string& name, Init init);

 protected:
  // Declarations (in constructors). Names are unique per module and contain no '.'.
  void register_parameter(std::string name, Shape shape, Init init, DType dtype = DType::f32);
  void register_buffer(std::string name, Shape shape, Init init, DType dtype = DType::f32,
                       std::optional<ElemType> file_type = std::nullopt);
  // Adopts `m` as child `name`; a module has one parent (mn::Error for a second).
  template <class M>
  std::shared_ptr<M> register_module(std::string name, std::shared_ptr<M> m) {
    adopt(name, m);
    return m;
  }
  void adopt(const std::string& name, std::shared_ptr<Module> m);

  // In forward: the graph tensor of slot `name` in `g`, created on first use (a parameter or a
  // state named by the full key), found after; mn::Error when `g` holds that name with another
  // type.
  Tensor tensor(Graph& g, const std::string& name) const;
  // A name unique to this module for the seed of a random op (dropout masks).
  uint64_t op_seed(const std::string& what) const;

 private:
  void check_new_name(const std::string& name) const;
  const Slot& slot(const std::string& name) const;
  const Module& root() const;
  void collect(const std::string& prefix, const std::string& graph_prefix,
               std::vector<StateEntry>& out) const;

  std::string kind_;
  Module* parent_ = nullptr;
  std::string local_name_;
  bool training_ = true;
  uint64_t seed_ = 0;
  std::vector<Slot> slots_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
};

// ---- containers ----

// Children "0", "1", ... applied in order.
class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(std::vector<std::shared_ptr<Module>> modules);
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  Tensor forward(Tensor x) override;
};

// Children "0", "1", ... held for a parent's forward to use (no forward of its own).
class ModuleList : public Module {
 public:
  ModuleList() : Module("ModuleList") {}
  void push_back(std::shared_ptr<Module> m);
  size_t size() const { return named_children().size(); }
  std::shared_ptr<Module> operator[](size_t i) const;
  template <class M>
  std::shared_ptr<M> at(size_t i) const {
    auto m = std::dynamic_pointer_cast<M>((*this)[i]);
    if (!m) throw Error(where() + ": child " + std::to_string(i) + " has another type");
    return m;
  }
};

// ---- layers (src/nn/) ----

// y = x·weightᵀ + bias with weight [out, in]; x [..., in]. PyTorch's initialization
// (uniform ±1/√in for both).
class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias = true);
  Tensor forward(Tensor x) override;
  int64_t in_features, out_features;
  bool has_bias;
};

// weight [num_embeddings, embedding_dim] ~ N(0, 1); forward takes i32 indices of any shape.
// With padding_idx (negative counts from the end, as PyTorch), that row starts at zero and gets
// no gradient: it stays what it was initialized or loaded as.
class Embedding : public Module {
 public:
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(Tensor indices) override;
  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // in [0, num_embeddings) once constructed
};

// Normalizes over the trailing normalized_shape axes; weight ones, bias zeros.
class LayerNorm : public Module {
 public:
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true,
                     bool bias = true);
  Tensor forward(Tensor x) override;
  Shape normalized_shape;
  double eps;
  bool affine, has_bias;
};

// x [N, C, *] normalized over each group of C / num_groups channels and the spatial axes, then
// scaled and shifted per channel (weight ones, bias zeros), as torch.nn.GroupNorm.
class GroupNorm : public Module {
 public:
  GroupNorm(int64_t num_groups, int64_t num_channels, double eps = 1e-5, bool affine = true);
  Tensor forward(Tensor x) override;
  int64_t num_groups, num_channels;
  double eps;
  bool affine;
};

// x·rsqrt(mean(x²) + eps)·weight over the trailing axes, as torch.nn.RMSNorm; eps unset is the
// f32 machine epsilon (PyTorch's default).
class RMSNorm : public Module {
 public:
  explicit RMSNorm(Shape normalized_shape, std::optional<double> eps = std::nullopt,
                   bool elementwise_affine = true);
  Tensor forward(Tensor x) override;
  Shape normalized_shape;
  double eps;
  bool affine;
};

struct Conv1dConfig {
  int64_t stride = 1, padding = 0, dilation = 1, groups = 1;
  bool bias = true;
};

// weight [out, in/groups, k], bias [out]; x [N, in, L] (or [in, L]). Zero padding. As
// torch.nn.Conv1d (Whisper's encoder stem).
class Conv1d : public Module {
 public:
  Conv1d(int64_t in_channels, int64_t out_channels, int64_t kernel_size, Conv1dConfig config = {});
  Tensor forward(Tensor x) override;
  int64_t in_channels, out_channels, kernel_size;
  Conv1dConfig config;
};

struct Conv2dConfig {
  std::array<int64_t, 2> stride{1, 1};
  std::array<int64_t, 2> padding{0, 0};
  std::array<int64_t, 2> dilation{1, 1};
  int64_t groups = 1;
  bool bias = true;
};

// weight [out, in/groups, kh, kw], bias [out]; x [N, in, H, W]. Zero padding.
class Conv2d : public Module {
 public:
  Conv2d(int64_t in_channels, int64_t out_channels, std::array<int64_t, 2> kernel_size,
         Conv2dConfig config = {});
  Tensor forward(Tensor x) override;
  int64_t in_channels, out_channels;
  std::array<int64_t, 2> kernel_size;
  Conv2dConfig config;
};

// x [N, C, H, W]. Training normalizes with the batch's statistics and the graph updates
// running_mean, running_var (momentum, unbiased variance) and num_batches_tracked after each step;
// evaluation normalizes with the running statistics.
class BatchNorm2d : public Module {
 public:
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, double momentum = 0.1,
                       bool affine = true);
  Tensor forward(Tensor x) override;
  int64_t num_features;
  double eps, momentum;
  bool affine;
};

// Inverted dropout in training, the identity in evaluation. The mask is a function of the
// module's seed, the element index and the graph's step counter (the i32 state
// "nn/dropout_step", increased after every step), so every step drops other elements.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5);
  Tensor forward(Tensor x) override;
  double p;
};

// Activations and reshapes as modules, for Sequential.
class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(Tensor x) override { return relu(x); }
};
class GELU : public Module {
 public:
  explicit GELU(GeluApprox approximate = GeluApprox::none)
      : Module("GELU"), approximate(approximate) {}
  Tensor forward(Tensor x) override { return gelu(x, approximate); }
  GeluApprox approximate;
};
class SiLU : public Module {
 public:
  SiLU() : Module("SiLU") {}
  Tensor forward(Tensor x) override { return silu(x); }
};
// Flattens axes [start_dim, end] into one: [N, C, H, W] -> [N, C·H·W].
class Flatten : public Module {
 public:
  explicit Flatten(int64_t start_dim = 1) : Module("Flatten"), start_dim(start_dim) {}
  Tensor forward(Tensor x) override;
  int64_t start_dim;
};

struct MultiheadAttentionConfig {
  double dropout = 0.0;  // on the attention probabilities, in training
  bool bias = true;
};

// torch.nn.MultiheadAttention with batch_first=True: in_proj_weight [3E, E] (query, key, value
// rows), in_proj_bias [3E], out_proj (Linear E -> E). Inputs [B, L, E]; mask additive, broadcast
// to [B, heads, Lq, Lk] (a [Lq, Lk] float mask as PyTorch's attn_mask); key_padding_mask [B, Lk]
// as PyTorch's: integers (its bool) where nonzero marks a key left out, or floats added.
class MultiheadAttention : public Module {
 public:
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionConfig config = {});
  Tensor forward(Tensor x) override { return forward(x, x, x); }
  Tensor forward(Tensor query, Tensor key, Tensor value, Tensor mask = {}, bool causal = false,
                 Tensor key_padding_mask = {});
  int64_t embed_dim, num_heads;
  MultiheadAttentionConfig config;
  std::shared_ptr<Linear> out_proj;

 private:
  Tensor project(Tensor x, int64_t part) const;
  Tensor attend(Tensor q, Tensor k, Tensor v, Tensor mask, bool causal);
};

struct TransformerBlockConfig {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  bool gelu = false;  // the feed-forward activation: ReLU (PyTorch's default) or exact GELU
  double layer_norm_eps = 1e-5;
  bool bias = true;
};

// A pre-norm encoder block, torch.nn.TransformerEncoderLayer(batch_first=True, norm_first=True):
//   x = x + dropout1(self_attn(norm1(x)));  x = x +
//   dropout2(linear2(dropout(act(linear1(norm2(x))))))
class TransformerBlock : public Module {
 public:
  TransformerBlock(int64_t d_model, int64_t nhead, TransformerBlockConfig config = {});
  Tensor forward(Tensor x) override { return forward(x, {}, false); }
  // src_key_padding_mask as MultiheadAttention's key_padding_mask.
  Tensor forward(Tensor x, Tensor mask, bool causal, Tensor key_padding_mask = {});
  TransformerBlockConfig config;
  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;
  std::shared_ptr<Dropout> dropout, dropout1, dropout2;
};

// ---- state_dict (src/nn/state_dict.cpp) ----

using StateDict = std::map<std::string, Array>;

// The module's parameters and buffers as the session holds them, keyed as PyTorch's state_dict.
// mn::Error naming the key when the session lacks one (no graph of the session used it).
StateDict state_dict(const Module& m, const Session& s);
// Strict: every key of the module exactly once, no other key, each with the slot's shape and
// dtype; otherwise mn::Error naming the key (every missing and unexpected key are listed).
void load_state_dict(const Module& m, Session& s, const StateDict& values);
// The same through a safetensors file, in PyTorch's dtypes (num_batches_tracked is I64), so that
// torch's load_state_dict(safetensors.torch.load_file(path)) reads what we write and back.
void save_state_dict(const Module& m, const Session& s, const std::filesystem::path& path);
void load_state_dict(const Module& m, Session& s, const std::filesystem::path& path);

}  // namespace mn::nn
