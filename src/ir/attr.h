#pragma once
// Op attributes: a variant of the descriptor structs, with generic equality, hashing and
// printing built on each descriptor's TG_FIELDS reflection.
#include <cstdint>
#include <sstream>
#include <string>
#include <string_view>
#include <type_traits>
#include <variant>
#include <vector>

#include "tgraph/descriptors.h"

namespace tg::detail {

using Attr = std::variant<NoDesc, ReduceDesc, AxisDesc, CumulativeDesc, TopKDesc, SortDesc,
                          ScalarDesc, CastDesc, MatmulDesc, BandPartDesc, ConvDesc, ConvGradDesc,
                          PoolDesc, NormDesc, LossDesc, AttentionDesc, ShapeDesc, AxesDesc,
                          SplitDesc, SliceDesc, PadDesc, TileDesc, ArangeDesc, OneHotDesc,
                          BlockDesc, ResizeDesc, RandomDesc, DropoutDesc, GatherDesc, ScatterDesc,
                          StencilDesc, NameDesc, OptimizerDesc, SeedDesc, ScaledMatmulDesc,
                          CollectiveDesc, SizedDesc>;

template <class T>
concept Reflected = requires(const T& t) { t.fields(); };

inline void hash_mix(uint64_t& h, uint64_t v) { h ^= v + 0x9e3779b97f4a7c15ULL + (h << 6) + (h >> 2); }

template <class T>
void hash_value(uint64_t& h, const T& v) {
  if constexpr (Reflected<T>) {
    std::apply([&](const auto&... f) { (hash_value(h, f), ...); }, v.fields());
  } else if constexpr (std::is_same_v<T, std::string>) {
    hash_mix(h, std::hash<std::string>()(v));
  } else if constexpr (requires { v.begin(); v.size(); }) {
    hash_mix(h, v.size());
    for (const auto& e : v) hash_value(h, e);
  } else if constexpr (std::is_floating_point_v<T>) {
    hash_mix(h, std::hash<double>()(static_cast<double>(v)));
  } else {
    hash_mix(h, static_cast<uint64_t>(v));
  }
}

/// A structural hash of an attribute (equal attributes hash equal).
inline uint64_t attr_hash(const Attr& a) {
  uint64_t h = a.index();
  std::visit([&](const auto& d) { hash_value(h, d); }, a);
  return h;
}

std::string enum_name(PaddingStyle v);
std::string enum_name(Layout v);
std::string enum_name(LossReduction v);
std::string enum_name(PadMode v);
std::string enum_name(ResizeMode v);
std::string enum_name(CoordinateMode v);
std::string enum_name(NearestRounding v);
std::string enum_name(Distribution v);
std::string enum_name(ScatterMode v);
std::string enum_name(Reduction v);
std::string enum_name(Boundary v);
std::string enum_name(CollectiveReduce v);
std::string enum_name(SizedKind v);
std::string enum_name(DType v);

template <class T>
void print_value(std::ostream& os, const T& v) {
  if constexpr (Reflected<T>) {
    os << "{";
    std::string_view names = T::field_names();
    bool first = true;
    std::apply(
        [&](const auto&... f) {
          [[maybe_unused]] auto one = [&](const auto& x) {
            size_t comma = names.find(',');
            std::string_view n = names.substr(0, comma);
            while (!n.empty() && n.front() == ' ') n.remove_prefix(1);
            names = comma == std::string_view::npos ? std::string_view{} : names.substr(comma + 1);
            os << (first ? "" : ", ") << n << "=";
            first = false;
            print_value(os, x);
          };
          (one(f), ...);
        },
        v.fields());
    os << "}";
  } else if constexpr (std::is_same_v<T, std::string>) {
    os << '"' << v << '"';
  } else if constexpr (requires { v.begin(); v.size(); }) {
    os << "[";
    bool first = true;
    for (const auto& e : v) {
      os << (first ? "" : ",");
      print_value(os, e);
      first = false;
    }
    os << "]";
  } else if constexpr (std::is_same_v<T, bool>) {
    os << (v ? "true" : "false");
  } else if constexpr (std::is_enum_v<T>) {
    os << enum_name(v);
  } else {
    os << v;
  }
}

/// "{axes=[1], keep_dims=false}", or "" for NoDesc.
inline std::string attr_str(const Attr& a) {
  if (std::holds_alternative<NoDesc>(a)) return "";
  std::ostringstream os;
  std::visit([&](const auto& d) { print_value(os, d); }, a);
  return os.str();
}

}  // namespace tg::detail
