// The DLPack exchange structs (dmlc/dlpack v0.8, ABI-stable), as the Python
// array API's __dlpack__ protocol passes them. Written from the published
// header's layout; Debian has no package for it.
#pragma once

#include <cstdint>

extern "C" {

enum DLDeviceType : int32_t { kDLCPU = 1, kDLCUDA = 2, kDLCUDAHost = 3 };

struct DLDevice {
  DLDeviceType device_type;
  int32_t device_id;
};

enum DLDataTypeCode : uint8_t { kDLInt = 0, kDLUInt = 1, kDLFloat = 2, kDLBfloat = 4, kDLBool = 6 };

struct DLDataType {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
};

struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements; null: compact row-major
  uint64_t byte_offset;
};

struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

}  // extern "C"
