#include "runtime/device_code.h"

namespace tg::detail {
namespace {
thread_local DeviceCode* current = nullptr;
}  // namespace

std::string device_code_key(int major, int minor, const std::string& source) {
  return std::to_string(major) + std::to_string(minor) + ":" + source;
}

void DeviceCode::record(int major, int minor, const std::string& source, Origin origin) {
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = kernels.try_emplace(device_code_key(major, minor, source));
  if (fresh) {
    it->second.major = major;
    it->second.minor = minor;
    it->second.source = source;
  }
  if (origin == Origin::compiled) ++compiled;
  if (origin == Origin::file) ++from_file;
}

void record_library_plan(const std::string& key, const std::string& value, bool replace) {
  DeviceCode* code = current;
  if (!code) return;
  std::lock_guard<std::mutex> lock(code->mu);
  if (replace) code->plans[key] = value;
  else code->plans.try_emplace(key, value);
}

void record_library_plan_later(const std::string& key, std::function<std::string()> value_later) {
  DeviceCode* code = current;
  if (!code) return;
  std::lock_guard<std::mutex> lock(code->mu);
  if (!code->plans.count(key)) code->later.try_emplace(key, std::move(value_later));
}

DeviceCodeScope::DeviceCodeScope(DeviceCode* code) : saved_(current) { current = code; }
DeviceCodeScope::~DeviceCodeScope() { current = saved_; }

DeviceCode* current_device_code() { return current; }

}  // namespace tg::detail
