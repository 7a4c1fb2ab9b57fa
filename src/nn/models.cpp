// Model builders: ResNet-18/50 (NHWC) and the BERT encoder, made from the layers of nn.h.
#include "tgraph/error.h"
#include "tgraph/nn.h"

namespace tg::nn {

namespace {

Conv2d::Options conv_opts(int64_t stride, int64_t padding, uint64_t seed) {
  Conv2d::Options o;
  o.stride = stride;
  o.padding = padding;
  o.bias = false;  // followed by BatchNorm
  o.seed = seed;
  return o;
}

// A residual block: basic (two 3x3 convs) or bottleneck (1x1, 3x3, 1x1 with expansion 4),
// with a 1x1 projection shortcut when the shape changes.
class ResidualBlock : public Module {
 public:
  ResidualBlock(Graph& g, const std::string& name, bool bottleneck, int64_t in, int64_t width, int64_t stride,
                uint64_t seed)
      : Module(name) {
    auto conv = [&](const std::string& n, int64_t ci, int64_t co, int64_t k, int64_t s) {
      convs_.push_back(add_child(std::make_shared<Conv2d>(g, child_name(n), ci, co, k, conv_opts(s, -1, seed))));
    };
    auto bn = [&](const std::string& n, int64_t c) {
      bns_.push_back(add_child(std::make_shared<BatchNorm2d>(g, child_name(n), c)));
    };
    int64_t out = bottleneck ? width * 4 : width;
    if (bottleneck) {
      conv("conv1", in, width, 1, 1), bn("bn1", width);
      conv("conv2", width, width, 3, stride), bn("bn2", width);
      conv("conv3", width, out, 1, 1), bn("bn3", out);
    } else {
      conv("conv1", in, width, 3, stride), bn("bn1", width);
      conv("conv2", width, width, 3, 1), bn("bn2", width);
    }
    if (stride != 1 || in != out) {
      down_conv_ = add_child(std::make_shared<Conv2d>(g, child_name("downsample.conv"), in, out, 1, conv_opts(stride, 0, seed)));
      down_bn_ = add_child(std::make_shared<BatchNorm2d>(g, child_name("downsample.bn"), out));
    }
  }

  Tensor forward(Graph& g, Tensor x) override {
    Tensor y = x;
    for (size_t i = 0; i < convs_.size(); ++i) {
      y = bns_[i]->forward(g, convs_[i]->forward(g, y));
      if (i + 1 < convs_.size()) y = g.relu(y);
    }
    Tensor sc = down_conv_ ? down_bn_->forward(g, down_conv_->forward(g, x)) : x;
    return g.relu(g.add(y, sc));
  }

 private:
  std::vector<std::shared_ptr<Conv2d>> convs_;
  std::vector<std::shared_ptr<BatchNorm2d>> bns_;
  std::shared_ptr<Conv2d> down_conv_;
  std::shared_ptr<BatchNorm2d> down_bn_;
};

}  // namespace

std::shared_ptr<Sequential> resnet(Graph& g, bool bottleneck, const std::vector<int64_t>& blocks,
                                   const ResNetConfig& c) {
  if (c.num_classes <= 0 || c.in_channels <= 0 || c.base_width <= 0 || blocks.empty())
    throw Error("[resnet] num_classes, in_channels, base_width and the block counts must be positive");
  auto net = std::make_shared<Sequential>(c.name);
  auto sub = [&](const std::string& n) { return c.name.empty() ? n : c.name + "." + n; };
  int64_t w = c.base_width;
  if (c.small_input) {
    net->add(std::make_shared<Conv2d>(g, sub("stem.conv"), c.in_channels, w, 3, conv_opts(1, 1, c.seed)));
    net->add(std::make_shared<BatchNorm2d>(g, sub("stem.bn"), w));
    net->add("relu", [](Graph& gg, Tensor x) { return gg.relu(x); });
  } else {
    net->add(std::make_shared<Conv2d>(g, sub("stem.conv"), c.in_channels, w, 7, conv_opts(2, 3, c.seed)));
    net->add(std::make_shared<BatchNorm2d>(g, sub("stem.bn"), w));
    net->add("relu", [](Graph& gg, Tensor x) { return gg.relu(x); });
    net->add("maxpool", [](Graph& gg, Tensor x) {
      PoolDesc p;
      p.kernel = {3, 3};
      p.stride = {2, 2};
      p.explicit_padding = {1, 1, 1, 1};
      return gg.max_pool2d(x, p);
    });
  }
  int64_t in = w;
  for (size_t s = 0; s < blocks.size(); ++s) {
    int64_t width = w << s;
    for (int64_t b = 0; b < blocks[s]; ++b) {
      int64_t stride = (s > 0 && b == 0) ? 2 : 1;
      std::string n = sub("layer" + std::to_string(s + 1) + "." + std::to_string(b));
      net->add(std::make_shared<ResidualBlock>(g, n, bottleneck, in, width, stride, c.seed));
      in = bottleneck ? width * 4 : width;
    }
  }
  // Global average pooling as a mean over H and W (differentiable, NHWC).
  net->add("avgpool", [](Graph& gg, Tensor x) { return gg.reduce_mean(x, {1, 2}); });
  Linear::Options lo;
  lo.seed = c.seed;
  net->add(std::make_shared<Linear>(g, sub("fc"), in, c.num_classes, lo));
  return net;
}

std::shared_ptr<Sequential> resnet18(Graph& g, const ResNetConfig& c) { return resnet(g, false, {2, 2, 2, 2}, c); }

std::shared_ptr<Sequential> resnet50(Graph& g, const ResNetConfig& c) { return resnet(g, true, {3, 4, 6, 3}, c); }

// ---- BERT ------------------------------------------------------------------------------------

Bert::Bert(Graph& g, const BertConfig& c) : Module(c.name), config(c) {
  if (c.layers <= 0 || c.hidden <= 0 || c.heads <= 0 || c.hidden % c.heads || c.intermediate <= 0 ||
      c.vocab <= 0 || c.max_positions <= 0 || c.type_vocab <= 0)
    throw Error("[bert] bad config: sizes must be positive and hidden a multiple of heads (hidden " +
                std::to_string(c.hidden) + ", heads " + std::to_string(c.heads) + ")");
  int64_t h = c.hidden;
  Linear::Options lo;
  lo.init = Init::normal;  // BERT initialises every weight with N(0, 0.02)
  lo.seed = c.seed;
  words_ = add_child(std::make_shared<Embedding>(g, child_name("embeddings.word"), c.vocab, h, 0.02, c.seed));
  positions_ = add_child(std::make_shared<Embedding>(g, child_name("embeddings.position"), c.max_positions, h, 0.02, c.seed));
  types_ = add_child(std::make_shared<Embedding>(g, child_name("embeddings.token_type"), c.type_vocab, h, 0.02, c.seed));
  ln_emb_ = add_child(std::make_shared<LayerNorm>(g, child_name("embeddings.ln"), h, c.layer_norm_eps));
  if (c.dropout > 0) drop_emb_ = add_child(std::make_shared<Dropout>(g, child_name("embeddings.dropout"), c.dropout, c.seed));
  for (int64_t i = 0; i < c.layers; ++i) {
    std::string p = "layer." + std::to_string(i) + ".";
    auto lin = [&](const std::string& n, int64_t in, int64_t out) {
      return add_child(std::make_shared<Linear>(g, child_name(p + n), in, out, lo));
    };
    Layer L;
    L.q = lin("attention.query", h, h);
    L.k = lin("attention.key", h, h);
    L.v = lin("attention.value", h, h);
    L.o = lin("attention.output", h, h);
    L.ln_attn = add_child(std::make_shared<LayerNorm>(g, child_name(p + "attention.ln"), h, c.layer_norm_eps));
    L.ffn_in = lin("ffn.intermediate", h, c.intermediate);
    L.ffn_out = lin("ffn.output", c.intermediate, h);
    L.ln_ffn = add_child(std::make_shared<LayerNorm>(g, child_name(p + "ffn.ln"), h, c.layer_norm_eps));
    if (c.dropout > 0) {
      L.drop_attn = add_child(std::make_shared<Dropout>(g, child_name(p + "attention.dropout"), c.dropout, c.seed));
      L.drop_ffn = add_child(std::make_shared<Dropout>(g, child_name(p + "ffn.dropout"), c.dropout, c.seed));
    }
    layers_.push_back(L);
  }
}

Tensor Bert::forward(Graph& g, Tensor ids) { return forward(g, ids, Tensor(), Tensor()); }

Tensor Bert::forward(Graph& g, Tensor ids, Tensor token_types, Tensor mask) {
  const BertConfig& c = config;
  if (ids.rank() != 2 || !is_integer(ids.dtype()))
    throw Error("[bert] ids must be integer [batch, length], got " + ids.type().str());
  int64_t B = ids.shape()[0], L = ids.shape()[1], H = c.hidden, heads = c.heads, dh = H / heads;
  if (L < 0) throw Error("[bert] the sequence length must be static, ids are " + ids.type().str());
  if (L > c.max_positions)
    throw Error("[bert] length " + std::to_string(L) + " exceeds max_positions " + std::to_string(c.max_positions));
  auto drop = [&](const std::shared_ptr<Dropout>& d, Tensor x) { return d ? d->forward(g, x) : x; };

  Tensor x = words_->forward(g, ids);                                     // [B, L, H]
  x = g.add(x, g.slice(positions_->table, {0, 0}, {L, -1}));              // + [L, H]
  if (token_types.valid()) x = g.add(x, types_->forward(g, token_types));
  else x = g.add(x, g.slice(types_->table, {0, 0}, {1, -1}));             // type 0 everywhere
  x = drop(drop_emb_, ln_emb_->forward(g, x));

  std::optional<Tensor> att_mask;
  if (mask.valid()) {
    if (mask.dtype() != DType::boolean) throw Error("[bert] mask must be bool [batch, length], got " + mask.type().str());
    att_mask = g.expand_dims(mask, {1, 2});  // [B, 1, 1, L]: keys that may be attended
  }
  auto heads_first = [&](Tensor t) {  // [B, L, H] -> [B, heads, L, dh]
    return g.transpose(g.reshape(t, {B, L, heads, dh}), {0, 2, 1, 3});
  };
  for (Layer& l : layers_) {
    Tensor q = heads_first(l.q->forward(g, x)), k = heads_first(l.k->forward(g, x));
    Tensor v = heads_first(l.v->forward(g, x));
    Tensor a = g.scaled_dot_product_attention(q, k, v, att_mask);
    a = g.reshape(g.transpose(a, {0, 2, 1, 3}), {B, L, H});
    x = l.ln_attn->forward(g, g.add(x, drop(l.drop_attn, l.o->forward(g, a))));
    Tensor f = l.ffn_out->forward(g, g.gelu(l.ffn_in->forward(g, x)));
    x = l.ln_ffn->forward(g, g.add(x, drop(l.drop_ffn, f)));
  }
  return x;
}

std::shared_ptr<Bert> bert_base(Graph& g, const BertConfig& c) { return std::make_shared<Bert>(g, c); }

}  // namespace tg::nn
