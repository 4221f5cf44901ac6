// The built-in directory store (kvblock.h, "The built-in directory store"): one file per block, named by its
// store key, written to a temporary name and renamed into place so that a reader on any machine sharing
// the directory sees a whole file or none; a header carries the key, the size and a checksum, which a
// get verifies before it reports success. Synchronous: the I/O runs inside put and get, and the gets'
// completions wait in a list for the next poll.
#define XXH_INLINE_ALL
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <xxhash.h>
#pragma GCC diagnostic pop

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "capi_guard.h"
#include "capi_struct.h"

struct kvb_store_dir {
  std::string path;
  std::vector<char*> regions;
  size_t block_bytes = 0, stride = 0;
  uint32_t num_blocks = 0;
  std::mutex mu;  // a store may be shared by several managers (each calls under its own lock)
  std::vector<kvb_store_completion> done;
  uint64_t tmp_counter = 0;
};

namespace {

constexpr char kMagic[8] = {'K', 'V', 'B', 'S', 'T', 'O', 'R', '1'};
constexpr uint32_t kVersion = 1, kHeaderBytes = 64;

struct FileHeader {  // 64 bytes, little-endian (the library assumes a little-endian host)
  char magic[8];
  uint32_t version, header_bytes;
  uint64_t key_lo, key_hi;
  uint64_t payload_bytes;
  uint64_t checksum;  // xxh64 (seed 0) of the payload
  uint64_t reserved[2];
};
static_assert(sizeof(FileHeader) == kHeaderBytes, "file header layout");

std::string file_name(const kvb_store_dir& d, const kvb_store_key& k) {
  char hex[40];
  std::snprintf(hex, sizeof hex, "%016" PRIx64 "%016" PRIx64, k.hi, k.lo);
  return d.path + "/" + hex + ".kvb";
}

bool write_all(int fd, const void* p, size_t n) {
  const char* c = static_cast<const char*>(p);
  while (n > 0) {
    ssize_t w = ::write(fd, c, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    c += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  char* c = static_cast<char*>(p);
  while (n > 0) {
    ssize_t r = ::read(fd, c, n);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) return false;  // a short file is a partial write by someone else: a failed get
    c += r;
    n -= static_cast<size_t>(r);
  }
  return true;
}

uint64_t payload_bytes(const kvb_store_dir& d) { return static_cast<uint64_t>(d.block_bytes) * d.regions.size(); }

int dir_lookup(void* user, const kvb_store_key* keys, size_t n, size_t* num_found) {
  auto* d = static_cast<kvb_store_dir*>(user);
  size_t k = 0;
  struct stat st;
  while (k < n && ::stat(file_name(*d, keys[k]).c_str(), &st) == 0 && S_ISREG(st.st_mode) &&
         static_cast<uint64_t>(st.st_size) == kHeaderBytes + payload_bytes(*d))
    ++k;
  *num_found = k;
  return 0;
}

int dir_put(void* user, const kvb_store_key* key, int32_t host_block) {
  auto* d = static_cast<kvb_store_dir*>(user);
  if (host_block < 0 || static_cast<uint32_t>(host_block) >= d->num_blocks) return -1;
  FileHeader h{};
  std::memcpy(h.magic, kMagic, sizeof kMagic);
  h.version = kVersion;
  h.header_bytes = kHeaderBytes;
  h.key_lo = key->lo;
  h.key_hi = key->hi;
  h.payload_bytes = payload_bytes(*d);
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  const size_t off = static_cast<size_t>(host_block) * d->stride;
  for (char* r : d->regions) XXH64_update(&st, r + off, d->block_bytes);
  h.checksum = XXH64_digest(&st);
  const std::string final_name = file_name(*d, *key);
  uint64_t counter;
  {
    std::lock_guard<std::mutex> lock(d->mu);
    counter = d->tmp_counter++;
  }
  char suffix[64];
  std::snprintf(suffix, sizeof suffix, ".tmp.%ld.%" PRIu64, static_cast<long>(::getpid()), counter);
  const std::string tmp = final_name + suffix;
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return -1;
  bool ok = write_all(fd, &h, sizeof h);
  for (size_t i = 0; ok && i < d->regions.size(); ++i) ok = write_all(fd, d->regions[i] + off, d->block_bytes);
  ok = (::close(fd) == 0) && ok;
  if (ok) ok = ::rename(tmp.c_str(), final_name.c_str()) == 0;  // atomic: a whole file or the old one
  if (!ok) ::unlink(tmp.c_str());
  return ok ? 0 : -1;
}

// 0 if the file holds key's bytes (now in host block), else nonzero. The host block may be partly written.
int read_block(kvb_store_dir& d, const kvb_store_key& key, int32_t host_block) {
  if (host_block < 0 || static_cast<uint32_t>(host_block) >= d.num_blocks) return -1;
  int fd = ::open(file_name(d, key).c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  FileHeader h;
  bool ok = read_all(fd, &h, sizeof h) && std::memcmp(h.magic, kMagic, sizeof kMagic) == 0 && h.version == kVersion &&
            h.header_bytes == kHeaderBytes && h.key_lo == key.lo && h.key_hi == key.hi &&
            h.payload_bytes == payload_bytes(d);
  XXH64_state_t st;
  XXH64_reset(&st, 0);
  const size_t off = static_cast<size_t>(host_block) * d.stride;
  for (size_t i = 0; ok && i < d.regions.size(); ++i) {
    ok = read_all(fd, d.regions[i] + off, d.block_bytes);
    if (ok) XXH64_update(&st, d.regions[i] + off, d.block_bytes);
  }
  char extra;
  if (ok) ok = ::read(fd, &extra, 1) == 0;  // longer than its header says: not a file we wrote
  ::close(fd);
  return ok && XXH64_digest(&st) == h.checksum ? 0 : -2;
}

int dir_get(void* user, const kvb_store_key* key, int32_t host_block, uint64_t ticket) {
  auto* d = static_cast<kvb_store_dir*>(user);
  kvb_store_completion c{};
  c.ticket = ticket;
  c.status = read_block(*d, *key, host_block);
  std::lock_guard<std::mutex> lock(d->mu);
  try {
    d->done.push_back(c);
  } catch (...) {
    return -1;  // out of memory: report the get as failed now
  }
  return 0;
}

int dir_poll(void* user, kvb_store_completion* done, size_t capacity, size_t* num_done) {
  auto* d = static_cast<kvb_store_dir*>(user);
  std::lock_guard<std::mutex> lock(d->mu);
  size_t n = std::min(capacity, d->done.size());
  if (n) std::memcpy(done, d->done.data(), n * sizeof(kvb_store_completion));  // data() may be NULL when empty
  d->done.erase(d->done.begin(), d->done.begin() + static_cast<long>(n));
  *num_done = n;
  return 0;
}

}  // namespace

using kvb::Code;
using kvb::fail;

namespace {

// mkdir -p: path and its missing parents (a parent made by someone else meanwhile is fine).
void make_directories(const char* path) {
  std::string p(path);
  for (size_t i = 1; i <= p.size(); ++i) {
    if (i < p.size() && p[i] != '/') continue;
    const std::string part = p.substr(0, i);
    if (::mkdir(part.c_str(), 0755) != 0 && errno != EEXIST)
      fail(Code::invalid_argument, "store directory '%s': cannot create '%s' (%s)", path, part.c_str(),
           std::strerror(errno));
  }
}

}  // namespace

extern "C" {

void kvb_store_dir_config_init(kvb_store_dir_config* cfg) {
  kvb::init_struct(cfg);
}

kvb_status kvb_store_dir_create(const kvb_store_dir_config* cfg, kvb_store_dir** out, kvb_store* table) {
  return kvb::guarded([&] {
    kvb::require_struct(cfg, offsetof(kvb_store_dir_config, region_block_stride) + sizeof(size_t),
                        "kvb_store_dir_config");
    if (!out || !table) fail(Code::invalid_argument, "out or table is NULL");
    kvb::require_struct(table, offsetof(kvb_store, poll) + sizeof(table->poll), "kvb_store");
    if (!cfg->path || !cfg->path[0]) fail(Code::invalid_argument, "path is NULL or empty");
    if (cfg->num_regions == 0 || !cfg->regions) fail(Code::invalid_argument, "num_regions is %zu and regions %s",
                                                     cfg->num_regions, cfg->regions ? "is set" : "is NULL");
    if (cfg->region_block_bytes == 0) fail(Code::invalid_argument, "region_block_bytes is 0");
    if (cfg->num_host_blocks == 0) fail(Code::invalid_argument, "num_host_blocks is 0");
    const size_t stride = cfg->region_block_stride ? cfg->region_block_stride : cfg->region_block_bytes;
    if (stride < cfg->region_block_bytes)
      fail(Code::invalid_argument, "region_block_stride %zu is smaller than region_block_bytes %zu", stride,
           cfg->region_block_bytes);
    for (size_t i = 0; i < cfg->num_regions; ++i)
      if (!cfg->regions[i]) fail(Code::invalid_argument, "regions[%zu] is NULL", i);
    make_directories(cfg->path);
    struct stat st;
    if (::stat(cfg->path, &st) != 0 || !S_ISDIR(st.st_mode))
      fail(Code::invalid_argument, "store directory '%s' is not a directory", cfg->path);
    std::unique_ptr<kvb_store_dir> owner(new kvb_store_dir);
    kvb_store_dir* d = owner.get();
    d->path = cfg->path;
    for (size_t i = 0; i < cfg->num_regions; ++i) d->regions.push_back(static_cast<char*>(cfg->regions[i]));
    d->block_bytes = cfg->region_block_bytes;
    d->stride = stride;
    d->num_blocks = cfg->num_host_blocks;
    const uint32_t caller_size = table->struct_size;
    kvb_store t;
    kvb_store_init(&t);
    t.user = d;
    t.lookup = dir_lookup;
    t.put = dir_put;
    t.get = dir_get;
    t.poll = dir_poll;
    t.num_host_blocks = cfg->num_host_blocks;
    t.block_bytes = static_cast<uint64_t>(cfg->region_block_bytes) * cfg->num_regions;
    std::memcpy(static_cast<void*>(table), &t, std::min<size_t>(caller_size, sizeof t));
    table->struct_size = caller_size;
    *out = owner.release();
  });
}

void kvb_store_dir_destroy(kvb_store_dir* dir) { delete dir; }

}  // extern "C"
