#include "kiln/ops/device_context.h"

namespace kiln::ops {
namespace {

const DeviceContext& single_device() {
  static const DeviceContext context;
  return context;
}

thread_local const DeviceContext* tls_context = nullptr;

}  // namespace

const DeviceContext& current_device() { return tls_context ? *tls_context : single_device(); }

ScopedDeviceContext::ScopedDeviceContext(const DeviceContext* context) : previous_(tls_context) {
  tls_context = context;
}

ScopedDeviceContext::~ScopedDeviceContext() { tls_context = previous_; }

}  // namespace kiln::ops
