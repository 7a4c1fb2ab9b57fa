#include <sstream>

#include "ops/infer.h"

namespace tg::detail {

std::string op_tag(OpKind k) { return std::string("[") + op_name(k) + "] "; }

InferResult op_error(const InferContext& c, const std::string& msg) {
  return InferResult::fail(op_tag(c.kind) + msg);
}

std::optional<int64_t> normalize_axis(int64_t axis, int64_t rank) {
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank) return std::nullopt;
  return axis;
}

std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b) {
  if (!a.ranked() || !b.ranked()) return Shape::unranked();
  int64_t r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int64_t i = 0; i < r; ++i) {
    int64_t ia = i - (r - a.rank()), ib = i - (r - b.rank());
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    int64_t d;
    if (da == db) d = da;
    else if (da == 1) d = db;
    else if (db == 1) d = da;
    else if (da < 0 && db < 0) d = -1;
    else if (da < 0) d = db;  // the dynamic dim must be db (or 1) at run time
    else if (db < 0) d = da;
    else return std::nullopt;
    out[static_cast<size_t>(i)] = d;
  }
  return Shape(out);
}

std::string describe_inputs(const InferContext& c, std::initializer_list<const char*> names) {
  std::ostringstream os;
  size_t i = 0;
  for (const char* n : names) {
    if (i >= c.inputs.size()) break;
    os << (i ? ", " : "") << n << " is " << c.inputs[i].shape.str() << " "
       << dtype_name(c.inputs[i].dtype);
    ++i;
  }
  return os.str();
}

bool resolve_dim_sources(const InferContext& c, std::vector<int64_t>& dims, std::vector<bool>& from_source,
                         InferResult& err) {
  std::vector<int64_t> known;  // the sources' dims, in order
  for (size_t i = 1; i < c.inputs.size(); ++i) {
    if (!c.inputs[i].shape.ranked()) return true;  // unranked source: the rule decides
    for (int64_t d : c.inputs[i].shape.dims()) known.push_back(d);
  }
  from_source.assign(dims.size(), false);
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] > kDimFromSource) continue;
    const int64_t j = kDimFromSource - dims[i];
    if (j >= static_cast<int64_t>(known.size())) {
      err = op_error(c, "target dim " + std::to_string(i) + " takes dim " + std::to_string(j) +
                            " of its shape sources, which have " + std::to_string(known.size()) + " dims");
      return false;
    }
    dims[i] = known[static_cast<size_t>(j)] < 0 ? -1 : known[static_cast<size_t>(j)];
    from_source[i] = true;
  }
  return true;
}

// Spatial dim positions of a rank-4 activation in layout l; false if l is not nhwc / nchw.
bool spatial_axes(Layout l, int64_t& h, int64_t& w, int64_t& ch) {
  if (l != Layout::nhwc && l != Layout::nchw) return false;
  bool last = l == Layout::nhwc;
  h = last ? 1 : 2;
  w = h + 1;
  ch = last ? 3 : 1;
  return true;
}

bool arity_ok(const InferContext& c, size_t n, InferResult& err) {
  if (c.inputs.size() == n) return true;
  err = op_error(c, "expects " + std::to_string(n) + " inputs, got " +
                        std::to_string(c.inputs.size()));
  return false;
}

}  // namespace tg::detail
