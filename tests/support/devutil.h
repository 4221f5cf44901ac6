// Small CUDA runtime helpers for the kernel tests (tests/support/devutil.cu, linked into the C++ tests by
// the Makefile, not into libkvblock; they exist only in builds with KVB_WITH_CUDA). Every function throws kvb::Error(device) on a CUDA error.
#pragma once
#include <cstddef>

namespace kvb {
namespace kern {
namespace devutil {

void* device_malloc(size_t bytes);
void device_free(void* p);
void* pinned_malloc(size_t bytes);
void pinned_free(void* p);
void copy(void* dst, const void* src, size_t bytes);  // cudaMemcpy(Default), synchronous
void copy_async(void* dst, const void* src, size_t bytes, void* stream);
void memset_device(void* p, int value, size_t bytes);
void synchronize();
void* stream_create();
void stream_destroy(void* s);
void stream_sync(void* s);
void* event_create();
void event_destroy(void* e);
void event_record(void* e, void* stream);
float event_elapsed_ms(void* start, void* stop);  // waits for stop
void capture_begin(void* stream);
void* capture_end(void* stream);  // returns an instantiated graph
void graph_launch(void* exec, void* stream);
void graph_destroy(void* exec);
const char* device_name(int index);

}  // namespace devutil
}  // namespace kern
}  // namespace kvb
