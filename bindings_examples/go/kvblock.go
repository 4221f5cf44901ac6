// Package kvblock is a thin Go wrapper over libkvblock, loaded at run time with dlopen (no link-time
// dependency). The library is found through $KVBLOCK_LIB, else the build tree
// (../../build/lib/libkvblock.so from this package), else the system loader path.
package kvblock

/*
#cgo CFLAGS: -I${SRCDIR}/../../abi -Wall -Wextra
#cgo LDFLAGS: -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "kvblock.h"

// One function pointer per entry point, typed from the header's own declarations.
#define KVB_FN(name) static __typeof__(name)* p_##name;
#define KVB_FUNCS(X) X(kvb_status_string) X(kvb_last_error) X(kvb_version_string) X(kvb_config_init) \
  X(kvb_manager_create) X(kvb_manager_destroy) X(kvb_seq_can_allocate) X(kvb_seq_allocate) \
  X(kvb_seq_commit) X(kvb_seq_can_append) X(kvb_seq_append) X(kvb_seq_free) X(kvb_seq_block_table) \
  X(kvb_num_free_blocks) X(kvb_stats_init) X(kvb_get_stats) X(kvb_check_invariants)
KVB_FUNCS(KVB_FN)

// Opens the library and resolves every symbol; NULL on success, else a message (static or dlerror's).
static const char* kvb_load(const char* path) {
  void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!h) return dlerror();
#define KVB_SYM(name) if (!(*(void**)&p_##name = dlsym(h, #name))) return "missing symbol " #name;
  KVB_FUNCS(KVB_SYM)
  return NULL;
}

// cgo cannot call C function pointers: one trampoline per call.
static const char* status_string(kvb_status s) { return p_kvb_status_string(s); }
static const char* last_error(void) { return p_kvb_last_error(); }
static const char* version_string(void) { return p_kvb_version_string(); }
static kvb_status manager_create(uint32_t num_blocks, uint32_t block_size, kvb_manager** out) {
  kvb_config cfg;
  p_kvb_config_init(&cfg);
  cfg.num_blocks = num_blocks;
  cfg.block_size = block_size;
  return p_kvb_manager_create(&cfg, out);
}
static void manager_destroy(kvb_manager* m) { p_kvb_manager_destroy(m); }
static kvb_status seq_can_allocate(kvb_manager* m, const int64_t* t, size_t n, size_t* cached) {
  return p_kvb_seq_can_allocate(m, t, n, cached);
}
static kvb_status seq_allocate(kvb_manager* m, int64_t id, const int64_t* t, size_t n, size_t* cached) {
  return p_kvb_seq_allocate(m, id, t, n, cached);
}
static kvb_status seq_commit(kvb_manager* m, int64_t id, size_t n) { return p_kvb_seq_commit(m, id, n); }
static kvb_status seq_can_append(kvb_manager* m, int64_t id, size_t n) { return p_kvb_seq_can_append(m, id, n); }
static kvb_status seq_append(kvb_manager* m, int64_t id, const int64_t* t, size_t n) {
  return p_kvb_seq_append(m, id, t, n);
}
static kvb_status seq_free(kvb_manager* m, int64_t id) { return p_kvb_seq_free(m, id); }
static kvb_status seq_block_table(kvb_manager* m, int64_t id, int32_t* out, size_t cap, size_t* len) {
  return p_kvb_seq_block_table(m, id, out, cap, len);
}
static kvb_status num_free_blocks(kvb_manager* m, size_t* n) { return p_kvb_num_free_blocks(m, n); }
static kvb_status get_stats(kvb_manager* m, kvb_stats* s) {
  p_kvb_stats_init(s);
  return p_kvb_get_stats(m, s);
}
static kvb_status check_invariants(kvb_manager* m) { return p_kvb_check_invariants(m); }
*/
import "C"

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"unsafe"
)

// Status is a libkvblock status code; the error statuses can be matched with errors.Is.
type Status int32

const (
	ErrInvalidArgument Status = C.KVB_ERR_INVALID_ARGUMENT
	ErrOutOfBlocks     Status = C.KVB_ERR_OUT_OF_BLOCKS
	ErrNoSuchSequence  Status = C.KVB_ERR_NO_SUCH_SEQUENCE
	ErrSequenceExists  Status = C.KVB_ERR_SEQUENCE_EXISTS
	ErrBadState        Status = C.KVB_ERR_BAD_STATE
	ErrBufferTooSmall  Status = C.KVB_ERR_BUFFER_TOO_SMALL
)

// Error returns the status name, e.g. "KVB_ERR_OUT_OF_BLOCKS".
func (s Status) Error() string {
	if err := load(); err != nil {
		return fmt.Sprintf("kvb status %d", int32(s))
	}
	return C.GoString(C.status_string(C.kvb_status(s)))
}

// Error is a failed call: its status and the detail from kvb_last_error().
type Error struct {
	Status  Status
	Message string
}

func (e *Error) Error() string { return e.Status.Error() + ": " + e.Message }

// Unwrap makes errors.Is(err, kvblock.ErrOutOfBlocks) work.
func (e *Error) Unwrap() error { return e.Status }

var (
	loadOnce sync.Once
	loadErr  error
	// LibraryPath is the library that was loaded (or tried).
	LibraryPath string
)

func libraryPath() string {
	if p := os.Getenv("KVBLOCK_LIB"); p != "" {
		return p
	}
	_, file, _, ok := runtime.Caller(0)
	if ok {
		built := filepath.Join(filepath.Dir(file), "..", "..", "build", "lib", "libkvblock.so")
		if _, err := os.Stat(built); err == nil {
			return built
		}
	}
	return "libkvblock.so.0" // the system loader path
}

func load() error {
	loadOnce.Do(func() {
		LibraryPath = libraryPath()
		path := C.CString(LibraryPath)
		defer C.free(unsafe.Pointer(path))
		if msg := C.kvb_load(path); msg != nil {
			loadErr = fmt.Errorf("kvblock: cannot load %s: %s (run make or set KVBLOCK_LIB)", LibraryPath, C.GoString(msg))
		}
	})
	return loadErr
}

// check turns a status into nil or an *Error. The calling goroutine must still be on the OS thread
// that made the call (kvb_last_error is thread-local): callers lock it with runtime.LockOSThread.
func check(s C.kvb_status) error {
	if s == C.KVB_OK {
		return nil
	}
	return &Error{Status: Status(s), Message: C.GoString(C.last_error())}
}

// call runs f on one locked OS thread, so that the error message read after it is f's.
func call(f func() C.kvb_status) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	return check(f())
}

// Version is "MAJOR.MINOR.PATCH" of the loaded library.
func Version() (string, error) {
	if err := load(); err != nil {
		return "", err
	}
	return C.GoString(C.version_string()), nil
}

// Manager is a KV-cache block manager. Call Close when done. Safe for concurrent use.
type Manager struct {
	m *C.kvb_manager
}

// NewManager creates a manager of numBlocks device blocks of blockSize tokens.
func NewManager(numBlocks, blockSize uint32) (*Manager, error) {
	if err := load(); err != nil {
		return nil, err
	}
	mgr := &Manager{}
	if err := call(func() C.kvb_status {
		return C.manager_create(C.uint32_t(numBlocks), C.uint32_t(blockSize), &mgr.m)
	}); err != nil {
		return nil, err
	}
	return mgr, nil
}

// Close destroys the manager; further calls fail with ErrInvalidArgument. Close is idempotent.
func (m *Manager) Close() error {
	if m.m != nil {
		C.manager_destroy(m.m)
		m.m = nil
	}
	return nil
}

func (m *Manager) handle() (*C.kvb_manager, error) {
	if m.m == nil {
		return nil, &Error{Status: ErrInvalidArgument, Message: "manager is closed"}
	}
	return m.m, nil
}

func tokenPtr(tokens []int64) *C.int64_t {
	if len(tokens) == 0 {
		return nil
	}
	return (*C.int64_t)(unsafe.Pointer(&tokens[0]))
}

// CanAllocate reports the cached tokens an Allocate would reuse, and whether the pool can hold the prompt now.
func (m *Manager) CanAllocate(tokens []int64) (cached int, ok bool, err error) {
	h, err := m.handle()
	if err != nil {
		return 0, false, err
	}
	var n C.size_t
	err = call(func() C.kvb_status { return C.seq_can_allocate(h, tokenPtr(tokens), C.size_t(len(tokens)), &n) })
	if errors.Is(err, ErrOutOfBlocks) {
		return int(n), false, nil
	}
	return int(n), err == nil, err
}

// Allocate creates sequence id for the prompt and returns the number of prefix-cached tokens.
func (m *Manager) Allocate(id int64, tokens []int64) (int, error) {
	h, err := m.handle()
	if err != nil {
		return 0, err
	}
	var n C.size_t
	err = call(func() C.kvb_status {
		return C.seq_allocate(h, C.int64_t(id), tokenPtr(tokens), C.size_t(len(tokens)), &n)
	})
	return int(n), err
}

// Commit records that n more tokens of the sequence have their K/V written.
func (m *Manager) Commit(id int64, n int) error {
	h, err := m.handle()
	if err != nil {
		return err
	}
	return call(func() C.kvb_status { return C.seq_commit(h, C.int64_t(id), C.size_t(n)) })
}

// CanAppend reports whether n more tokens fit now.
func (m *Manager) CanAppend(id int64, n int) (bool, error) {
	h, err := m.handle()
	if err != nil {
		return false, err
	}
	err = call(func() C.kvb_status { return C.seq_can_append(h, C.int64_t(id), C.size_t(n)) })
	if errors.Is(err, ErrOutOfBlocks) {
		return false, nil
	}
	return err == nil, err
}

// Append adds decode (or speculative) tokens to the sequence, all or nothing.
func (m *Manager) Append(id int64, tokens ...int64) error {
	h, err := m.handle()
	if err != nil {
		return err
	}
	return call(func() C.kvb_status { return C.seq_append(h, C.int64_t(id), tokenPtr(tokens), C.size_t(len(tokens))) })
}

// Free drops the sequence and releases its blocks.
func (m *Manager) Free(id int64) error {
	h, err := m.handle()
	if err != nil {
		return err
	}
	return call(func() C.kvb_status { return C.seq_free(h, C.int64_t(id)) })
}

// BlockTable returns the sequence's block ids (-1 where a sliding window released one).
func (m *Manager) BlockTable(id int64) ([]int32, error) {
	h, err := m.handle()
	if err != nil {
		return nil, err
	}
	var n C.size_t
	err = call(func() C.kvb_status { return C.seq_block_table(h, C.int64_t(id), nil, 0, &n) })
	if err != nil && !errors.Is(err, ErrBufferTooSmall) {
		return nil, err
	}
	table := make([]int32, int(n)+1) // +1: never a zero-length slice to take the address of
	err = call(func() C.kvb_status {
		return C.seq_block_table(h, C.int64_t(id), (*C.int32_t)(unsafe.Pointer(&table[0])), C.size_t(len(table)), &n)
	})
	return table[:n], err
}

// NumFreeBlocks is the number of blocks in the free queue (cached-free blocks included).
func (m *Manager) NumFreeBlocks() (int, error) {
	h, err := m.handle()
	if err != nil {
		return 0, err
	}
	var n C.size_t
	err = call(func() C.kvb_status { return C.num_free_blocks(h, &n) })
	return int(n), err
}

// Stats is a snapshot of the manager's counters.
type Stats struct {
	BlockSize                                     uint32
	NumBlocks, FreeBlocks, UsedBlocks, CachedFree uint64
	NumSeqs, QueryTokens, HitTokens, Computed     uint64
	Evictions                                     uint64
}

// Stats returns the manager's counters.
func (m *Manager) Stats() (Stats, error) {
	h, err := m.handle()
	if err != nil {
		return Stats{}, err
	}
	var s C.kvb_stats
	if err := call(func() C.kvb_status { return C.get_stats(h, &s) }); err != nil {
		return Stats{}, err
	}
	return Stats{
		BlockSize: uint32(s.block_size), NumBlocks: uint64(s.num_blocks), FreeBlocks: uint64(s.free_blocks),
		UsedBlocks: uint64(s.used_blocks), CachedFree: uint64(s.cached_free_blocks), NumSeqs: uint64(s.num_seqs),
		QueryTokens: uint64(s.query_tokens), HitTokens: uint64(s.hit_tokens), Computed: uint64(s.computed_tokens),
		Evictions: uint64(s.evictions),
	}, nil
}

// CheckInvariants runs the library's full consistency check (for tests).
func (m *Manager) CheckInvariants() error {
	h, err := m.handle()
	if err != nil {
		return err
	}
	return call(func() C.kvb_status { return C.check_invariants(h) })
}
