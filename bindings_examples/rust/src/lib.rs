//! Safe wrapper over libkvblock's C ABI, loaded at run time with `dlopen` (std only, no crates).
//!
//! The library is found through `$KVBLOCK_LIB`, else the build tree (`../../build/lib/libkvblock.so`
//! from this crate), else the system loader path.
//!
//! ```
//! use kvblock::{KvbError, Manager};
//!
//! let m = Manager::new(64, 16)?;
//! let prompt: Vec<i64> = (0..40).collect();
//! let cached = m.allocate(1, &prompt)?; // 0: nothing cached yet
//! m.commit(1, prompt.len() - cached)?; // K/V written for the uncached tokens
//! assert_eq!(m.block_table(1)?.len(), 3);
//!
//! let err = m.free(2).unwrap_err(); // no such sequence
//! assert_eq!(err.status, KvbError::NO_SUCH_SEQUENCE);
//! # Ok::<(), KvbError>(())
//! ```

use std::ffi::{CStr, CString};
use std::fmt;
use std::os::raw::{c_char, c_int, c_void};
use std::path::Path;
use std::sync::Mutex;

// ---- the C side: dlfcn from libc/libdl, and the parts of kvblock.h this wrapper uses ------------

#[link(name = "dl")]
extern "C" {
    fn dlopen(filename: *const c_char, flags: c_int) -> *mut c_void;
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
    fn dlerror() -> *mut c_char;
}
const RTLD_NOW: c_int = 2;

#[repr(C)]
struct Handle {
    _opaque: [u8; 0],
}

/// The first-version fields of `kvb_config`: `struct_size` tells the library which fields we pass, and
/// it uses its defaults for the fields added later. (kvb_config_init is not called: it writes the
/// loaded library's full struct size, which may be larger than this declaration.)
#[repr(C)]
struct RawConfig {
    struct_size: u32,
    block_size: u32,
    num_blocks: u32,
    num_host_blocks: u32,
    watermark: f32,
    non_cacheable_tokens: *const i64,
    num_non_cacheable_tokens: usize,
}

/// Manager settings; `Config::default()` is 16-token blocks with no host tier and no watermark.
#[derive(Debug, Clone, PartialEq)]
pub struct Config {
    pub num_blocks: u32,
    pub block_size: u32,
    pub num_host_blocks: u32,
    /// Fraction of blocks kept free for running sequences.
    pub watermark: f32,
    /// Token ids (e.g. image placeholders) whose blocks never enter the prefix cache.
    pub non_cacheable_tokens: Vec<i64>,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            num_blocks: 0,
            block_size: 16,
            num_host_blocks: 0,
            watermark: 0.0,
            non_cacheable_tokens: vec![],
        }
    }
}

/// A snapshot of the manager's counters (`kvb_stats`).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    struct_size: u32,
    pub block_size: u32,
    pub num_blocks: u64,
    pub free_blocks: u64,
    pub used_blocks: u64,
    pub cached_free_blocks: u64,
    pub num_seqs: u64,
    pub query_tokens: u64,
    pub hit_tokens: u64,
    pub computed_tokens: u64,
    pub evictions: u64,
    pub cow_copies: u64,
    pub swapped_out_blocks: u64,
    pub swapped_in_blocks: u64,
    pub num_host_blocks: u64,
    pub free_host_blocks: u64,
    pub events_dropped: u64,
}

type Status = i32;
const KVB_OK: Status = 0;
const KVB_ERR_BUFFER_TOO_SMALL: Status = -9;

/// Function pointers resolved once from the loaded library.
struct Api {
    status_string: unsafe extern "C" fn(Status) -> *const c_char,
    last_error: unsafe extern "C" fn() -> *const c_char,
    version_string: unsafe extern "C" fn() -> *const c_char,
    manager_create: unsafe extern "C" fn(*const RawConfig, *mut *mut Handle) -> Status,
    manager_destroy: unsafe extern "C" fn(*mut Handle),
    seq_allocate: unsafe extern "C" fn(*mut Handle, i64, *const i64, usize, *mut usize) -> Status,
    seq_commit: unsafe extern "C" fn(*mut Handle, i64, usize) -> Status,
    seq_can_append: unsafe extern "C" fn(*mut Handle, i64, usize) -> Status,
    seq_append: unsafe extern "C" fn(*mut Handle, i64, *const i64, usize) -> Status,
    seq_free: unsafe extern "C" fn(*mut Handle, i64) -> Status,
    seq_block_table: unsafe extern "C" fn(*mut Handle, i64, *mut i32, usize, *mut usize) -> Status,
    num_free_blocks: unsafe extern "C" fn(*mut Handle, *mut usize) -> Status,
    get_stats: unsafe extern "C" fn(*mut Handle, *mut Stats) -> Status,
    check_invariants: unsafe extern "C" fn(*mut Handle) -> Status,
}

fn library_path() -> String {
    if let Ok(p) = std::env::var("KVBLOCK_LIB") {
        if !p.is_empty() {
            return p;
        }
    }
    let built = concat!(env!("CARGO_MANIFEST_DIR"), "/../../build/lib/libkvblock.so");
    if Path::new(built).exists() {
        return built.to_string();
    }
    "libkvblock.so.0".to_string() // the system loader path
}

unsafe fn dl_error() -> String {
    let e = dlerror();
    if e.is_null() {
        "unknown dlopen error".into()
    } else {
        CStr::from_ptr(e).to_string_lossy().into_owned()
    }
}

/// Resolves `name` (NUL-terminated) to a function pointer of type `F`.
///
/// SAFETY: `F` must be the `unsafe extern "C" fn` type that kvblock.h declares for that symbol.
unsafe fn symbol<F: Copy>(lib: *mut c_void, name: &str) -> std::result::Result<F, String> {
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    let p = dlsym(lib, name.as_ptr().cast());
    if p.is_null() {
        return Err(format!("missing symbol {}", name.trim_end_matches('\0')));
    }
    Ok(std::mem::transmute_copy::<*mut c_void, F>(&p))
}

impl Api {
    fn load() -> std::result::Result<Api, String> {
        let path = library_path();
        let cpath = CString::new(path.clone()).map_err(|e| e.to_string())?;
        // SAFETY: each symbol is given the signature kvblock.h declares for it.
        unsafe {
            let h = dlopen(cpath.as_ptr(), RTLD_NOW);
            if h.is_null() {
                return Err(format!(
                    "cannot load {path}: {} (run `make` or set KVBLOCK_LIB)",
                    dl_error()
                ));
            }
            Ok(Api {
                status_string: symbol(h, "kvb_status_string\0")?,
                last_error: symbol(h, "kvb_last_error\0")?,
                version_string: symbol(h, "kvb_version_string\0")?,
                manager_create: symbol(h, "kvb_manager_create\0")?,
                manager_destroy: symbol(h, "kvb_manager_destroy\0")?,
                seq_allocate: symbol(h, "kvb_seq_allocate\0")?,
                seq_commit: symbol(h, "kvb_seq_commit\0")?,
                seq_can_append: symbol(h, "kvb_seq_can_append\0")?,
                seq_append: symbol(h, "kvb_seq_append\0")?,
                seq_free: symbol(h, "kvb_seq_free\0")?,
                seq_block_table: symbol(h, "kvb_seq_block_table\0")?,
                num_free_blocks: symbol(h, "kvb_num_free_blocks\0")?,
                get_stats: symbol(h, "kvb_get_stats\0")?,
                check_invariants: symbol(h, "kvb_check_invariants\0")?,
            })
        }
    }
}

fn api() -> Result<&'static Api> {
    // Loaded once and kept for the life of the process (a failed load is retried on the next call).
    static API: Mutex<Option<&'static Api>> = Mutex::new(None);
    let mut api = API.lock().unwrap_or_else(|e| e.into_inner());
    if api.is_none() {
        let loaded = Api::load().map_err(|message| KvbError {
            status: KvbError::INVALID_ARGUMENT,
            name: "LIBRARY_NOT_LOADED".into(),
            message,
        })?;
        *api = Some(Box::leak(Box::new(loaded)));
    }
    Ok(api.expect("loaded above"))
}

unsafe fn c_str(p: *const c_char) -> String {
    CStr::from_ptr(p).to_string_lossy().into_owned()
}

// ---- the safe side ----------------------------------------------------------------------------

/// A failed libkvblock call: the status code, its name, and `kvb_last_error()`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KvbError {
    pub status: i32,
    pub name: String,
    pub message: String,
}

impl KvbError {
    pub const INVALID_ARGUMENT: i32 = -1;
    pub const OUT_OF_BLOCKS: i32 = -2;
    pub const NO_SUCH_SEQUENCE: i32 = -3;
    pub const SEQUENCE_EXISTS: i32 = -4;
}

impl fmt::Display for KvbError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.name, self.message)
    }
}

impl std::error::Error for KvbError {}

pub type Result<T> = std::result::Result<T, KvbError>;

fn check(api: &Api, status: Status) -> Result<()> {
    if status == KVB_OK {
        return Ok(());
    }
    // SAFETY: both return static or thread-local NUL-terminated strings, read before the next call.
    unsafe {
        Err(KvbError {
            status,
            name: c_str((api.status_string)(status)),
            message: c_str((api.last_error)()),
        })
    }
}

/// "MAJOR.MINOR.PATCH" of the loaded library.
pub fn version() -> Result<String> {
    let api = api()?;
    // SAFETY: a static string.
    Ok(unsafe { c_str((api.version_string)()) })
}

/// A KV-cache block manager; destroyed on drop. Calls take `&self`: the library locks internally.
pub struct Manager {
    api: &'static Api,
    handle: *mut Handle,
}

// SAFETY: every function on one kvb_manager may be called from several threads (one lock inside).
unsafe impl Send for Manager {}
unsafe impl Sync for Manager {}

impl Manager {
    /// A manager of `num_blocks` device blocks of `block_size` tokens.
    pub fn new(num_blocks: u32, block_size: u32) -> Result<Manager> {
        Manager::with_config(&Config {
            num_blocks,
            block_size,
            ..Config::default()
        })
    }

    pub fn with_config(config: &Config) -> Result<Manager> {
        let api = api()?;
        let raw = RawConfig {
            struct_size: std::mem::size_of::<RawConfig>() as u32,
            block_size: config.block_size,
            num_blocks: config.num_blocks,
            num_host_blocks: config.num_host_blocks,
            watermark: config.watermark,
            non_cacheable_tokens: config.non_cacheable_tokens.as_ptr(),
            num_non_cacheable_tokens: config.non_cacheable_tokens.len(),
        };
        let mut handle = std::ptr::null_mut();
        // SAFETY: the library copies what it needs from raw during the call.
        check(api, unsafe { (api.manager_create)(&raw, &mut handle) })?;
        Ok(Manager { api, handle })
    }

    /// Creates sequence `seq_id` for the prompt; returns the number of prefix-cached tokens.
    pub fn allocate(&self, seq_id: i64, tokens: &[i64]) -> Result<usize> {
        let mut cached = 0;
        // SAFETY: the library reads tokens only during the call.
        check(self.api, unsafe {
            (self.api.seq_allocate)(
                self.handle,
                seq_id,
                tokens.as_ptr(),
                tokens.len(),
                &mut cached,
            )
        })?;
        Ok(cached)
    }

    /// `num_tokens` more tokens of the sequence have their K/V written.
    pub fn commit(&self, seq_id: i64, num_tokens: usize) -> Result<()> {
        check(self.api, unsafe {
            (self.api.seq_commit)(self.handle, seq_id, num_tokens)
        })
    }

    /// Whether `num_tokens` more tokens fit now (an out-of-blocks answer is `Ok(false)`).
    pub fn can_append(&self, seq_id: i64, num_tokens: usize) -> Result<bool> {
        match unsafe { (self.api.seq_can_append)(self.handle, seq_id, num_tokens) } {
            s if s == KvbError::OUT_OF_BLOCKS => Ok(false),
            s => check(self.api, s).map(|()| true),
        }
    }

    /// Appends decode (or speculative) tokens, all or nothing.
    pub fn append(&self, seq_id: i64, tokens: &[i64]) -> Result<()> {
        check(self.api, unsafe {
            (self.api.seq_append)(self.handle, seq_id, tokens.as_ptr(), tokens.len())
        })
    }

    /// Drops the sequence and releases its blocks.
    pub fn free(&self, seq_id: i64) -> Result<()> {
        check(self.api, unsafe {
            (self.api.seq_free)(self.handle, seq_id)
        })
    }

    /// The sequence's block ids (-1 where a sliding window released one).
    pub fn block_table(&self, seq_id: i64) -> Result<Vec<i32>> {
        let mut len = 0;
        let s = unsafe {
            (self.api.seq_block_table)(self.handle, seq_id, std::ptr::null_mut(), 0, &mut len)
        };
        if s != KVB_ERR_BUFFER_TOO_SMALL {
            check(self.api, s)?;
        }
        let mut table = vec![0i32; len];
        // SAFETY: the library writes at most `table.len()` entries.
        check(self.api, unsafe {
            (self.api.seq_block_table)(
                self.handle,
                seq_id,
                table.as_mut_ptr(),
                table.len(),
                &mut len,
            )
        })?;
        table.truncate(len);
        Ok(table)
    }

    /// Blocks in the free queue (cached-free blocks included).
    pub fn num_free_blocks(&self) -> Result<usize> {
        let mut n = 0;
        check(self.api, unsafe {
            (self.api.num_free_blocks)(self.handle, &mut n)
        })?;
        Ok(n)
    }

    pub fn stats(&self) -> Result<Stats> {
        let mut s = Stats {
            struct_size: std::mem::size_of::<Stats>() as u32,
            ..Stats::default()
        };
        check(self.api, unsafe {
            (self.api.get_stats)(self.handle, &mut s)
        })?;
        Ok(s)
    }

    /// Full consistency check of the manager's structures (for tests).
    pub fn check_invariants(&self) -> Result<()> {
        check(self.api, unsafe {
            (self.api.check_invariants)(self.handle)
        })
    }
}

impl Drop for Manager {
    fn drop(&mut self) {
        // SAFETY: the handle came from manager_create and is destroyed exactly once.
        unsafe { (self.api.manager_destroy)(self.handle) }
    }
}
