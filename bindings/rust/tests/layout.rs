//! Keeps `sys.rs` in step with the real header (git2-rs systest style): a C
//! probe built from include/tensorhub/tensorhub.h prints every struct's size,
//! every field's offset and size, and every constant; Rust computes the same
//! list from its own declarations and both must match line for line.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::PathBuf;
use std::process::Command;
use tensorhub::sys::*;

fn field_size<S, F>(_: fn(&S) -> &F) -> usize {
    size_of::<F>()
}

/// Each entry becomes one C printf line and one Rust value under the same key.
macro_rules! probe {
    (structs { $($s:ident { $($f:ident),* $(,)? })* } consts { $($c:ident),* $(,)? }) => {{
        let mut c = String::new();
        let mut rust = BTreeMap::new();
        $(
            c += &format!("P(\"{0}\", sizeof({0}));\n", stringify!($s));
            rust.insert(stringify!($s).to_string(), size_of::<$s>() as u64);
            $(
                let key = concat!(stringify!($s), ".", stringify!($f));
                c += &format!("P(\"{key}@\", offsetof({0}, {1}));\n", stringify!($s), stringify!($f));
                c += &format!("P(\"{key}#\", sizeof((({0} *)0)->{1}));\n", stringify!($s), stringify!($f));
                rust.insert(format!("{key}@"), offset_of!($s, $f) as u64);
                rust.insert(format!("{key}#"), field_size(|s: &$s| &s.$f) as u64);
            )*
        )*
        $(
            c += &format!("P(\"{0}\", {0});\n", stringify!($c));
            rust.insert(stringify!($c).to_string(), $c as u64);
        )*
        (c, rust)
    }};
}

#[test]
fn sys_declarations_match_the_header() {
    let (body, rust) = probe! {
        structs {
            th_tensor { name, dtype, ndim, shape, data, nbytes, mem_kind, device }
            th_range { tensor, offset, row_bytes, rows, src_stride, dst, dst_stride, dst_bytes, mem_kind, device }
            th_server_config { struct_size, listen_url, lease_ms, max_readers_per_source, token, metrics_url, standby,
                               etcd_endpoints, etcd_prefix, etcd_lease_ms, advertise_url, stripes }
            th_client_config { struct_size, server_url, worker_name, labels, timeout_ms, heartbeat_ms,
                               chunk_timeout_ms, max_inflight, retention, mutation_wait_ms, token, spill_pool_bytes,
                               spill_ahead, copy_threads }
            th_publish_config { struct_size, model, version, shard, num_shards, chunk_bytes, stats, checksums }
            th_fetch_config { struct_size, model, version, shard, timeout_ms, tensor, offset, length, stats,
                              progress, progress_user_data, progress_interval_ms, verify, cancel }
            th_sync_stats { struct_size, version, bytes, seconds, gbps, sources, replans, failed_sources, chunks,
                            bytes_from_publisher, bytes_from_replicas, checksum_mismatches, bytes_one_sided,
                            bytes_waited, bytes_kept, server_seconds }
        }
        consts {
            TH_OK, TH_ERR_INVALID_ARG, TH_ERR_NOT_FOUND, TH_ERR_NOT_COMMITTED, TH_ERR_LAYOUT_MISMATCH,
            TH_ERR_CONFLICT, TH_ERR_TIMEOUT, TH_ERR_UNAVAILABLE, TH_ERR_TRANSPORT, TH_ERR_PROTOCOL,
            TH_ERR_NO_MEMORY, TH_ERR_CLOSED, TH_ERR_UNSUPPORTED, TH_ERR_INTERNAL, TH_ERR_RETAINED, TH_ERR_CANCELED,
            TH_DTYPE_UINT8, TH_DTYPE_INT8, TH_DTYPE_INT16, TH_DTYPE_INT32, TH_DTYPE_INT64,
            TH_DTYPE_FLOAT16, TH_DTYPE_BFLOAT16, TH_DTYPE_FLOAT32, TH_DTYPE_FLOAT64, TH_DTYPE_BOOL,
            TH_DTYPE_FLOAT8_E4M3, TH_DTYPE_FLOAT8_E5M2, TH_DTYPE_UINT16, TH_DTYPE_UINT32, TH_DTYPE_UINT64,
            TH_MEM_HOST, TH_MEM_CUDA, TH_RETAIN_SPILL, TH_RETAIN_WAIT, TH_RETAIN_FAIL,
            TH_VERIFY_OFF, TH_VERIFY_SAMPLE, TH_VERIFY_ALL, TH_DEFAULT_CHECKSUMS, TH_DEFAULT_VERIFY,
            TH_LOG_ERROR, TH_LOG_WARN, TH_LOG_INFO, TH_LOG_DEBUG,
            TH_VERSION_MAJOR, TH_VERSION_MINOR, TH_VERSION_PATCH, TH_VERSION_NUMBER, TH_MAX_DIMS, TH_LATEST,
            TH_DEFAULT_LEASE_MS, TH_DEFAULT_MAX_READERS_PER_SOURCE, TH_DEFAULT_ETCD_LEASE_MS, TH_DEFAULT_STRIPES, TH_DEFAULT_TIMEOUT_MS, TH_DEFAULT_HEARTBEAT_MS,
            TH_DEFAULT_CHUNK_TIMEOUT_MS, TH_DEFAULT_MAX_INFLIGHT, TH_DEFAULT_RETENTION, TH_DEFAULT_MUTATION_WAIT_MS,
            TH_DEFAULT_SPILL_POOL_BYTES, TH_DEFAULT_SPILL_AHEAD, TH_DEFAULT_COPY_THREADS, TH_MAX_COPY_THREADS,
            TH_DEFAULT_NUM_SHARDS, TH_DEFAULT_CHUNK_BYTES, TH_DEFAULT_PROGRESS_INTERVAL_MS,
        }
    };
    // Enum sizes matter too: sys.rs passes every C enum as i32.
    let body = body
        + "P(\"sizeof th_status\", sizeof(th_status));\nP(\"sizeof th_dtype\", sizeof(th_dtype));\n"
        + "P(\"sizeof th_mem_kind\", sizeof(th_mem_kind));\nP(\"sizeof th_retention\", sizeof(th_retention));\n"
        + "P(\"sizeof th_verify\", sizeof(th_verify));\n";
    let mut rust = rust;
    for e in ["th_status", "th_dtype", "th_mem_kind", "th_retention", "th_verify"] {
        rust.insert(format!("sizeof {e}"), size_of::<i32>() as u64);
    }

    let c: BTreeMap<String, u64> = c_probe("layout_probe", &body)
        .lines()
        .map(|l| {
            let (k, v) = l.rsplit_once(' ').unwrap();
            (k.to_owned(), v.parse().unwrap())
        })
        .collect();
    let keys: std::collections::BTreeSet<&String> = c.keys().chain(rust.keys()).collect();
    let diff: Vec<String> = keys
        .into_iter()
        .filter(|k| c.get(*k) != rust.get(*k))
        .map(|k| format!("{k}: C {:?}, Rust {:?}", c.get(k), rust.get(k)))
        .collect();
    assert!(diff.is_empty(), "sys.rs disagrees with tensorhub.h:\n{}", diff.join("\n"));
}

/// The string constants: compared as text, not through the number probe.
#[test]
fn default_strings_match_the_header() {
    assert_eq!(c_probe("listen_url_probe", "fputs(TH_DEFAULT_LISTEN_URL, stdout);\n"), TH_DEFAULT_LISTEN_URL);
    assert_eq!(c_probe("etcd_prefix_probe", "fputs(TH_DEFAULT_ETCD_PREFIX, stdout);\n"), TH_DEFAULT_ETCD_PREFIX);
}

/// Every TH_DEFAULT_* of the header is mirrored (the probe above only checks
/// the ones it lists).
#[test]
fn every_header_default_is_mirrored() {
    let header = std::fs::read_to_string(format!("{}/tensorhub/tensorhub.h", env!("TENSORHUB_INCLUDE_DIR"))).unwrap();
    let rust = include_str!("../src/sys.rs");
    let named = |text: &str, marker: &str| -> std::collections::BTreeSet<String> {
        text.split(marker)
            .skip(1)
            .map(|rest| rest.split(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap().to_owned())
            .collect()
    };
    assert_eq!(named(&header, "#define TH_DEFAULT_"), named(rust, "pub const TH_DEFAULT_"));
}

/// Compiles and runs a C program printing "key value" lines. Each test names
/// its own program: tests run in parallel.
fn c_probe(name: &str, body: &str) -> String {
    let include = env!("TENSORHUB_INCLUDE_DIR");
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join(format!("{name}.c"));
    let exe = dir.join(name);
    let program = format!(
        "#include <stddef.h>\n#include <stdio.h>\n#include \"tensorhub/tensorhub.h\"\n\
         #define P(k, v) printf(\"%s %llu\\n\", k, (unsigned long long)(v))\n\
         int main(void) {{\n{body}return 0;\n}}\n"
    );
    std::fs::write(&src, program).unwrap();
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".into());
    let status = Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Werror", "-I", include, "-o"])
        .arg(&exe)
        .arg(&src)
        .status()
        .unwrap_or_else(|e| panic!("cannot run {cc}: {e}"));
    assert!(status.success(), "compiling the layout probe failed");
    let out = Command::new(&exe).output().unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap()
}

/// Every function of the header is declared in sys.rs with as many
/// parameters (types are covered by review; names and arity drift silently).
#[test]
fn every_header_function_is_declared() {
    let header = std::fs::read_to_string(format!("{}/tensorhub/tensorhub.h", env!("TENSORHUB_INCLUDE_DIR"))).unwrap();
    let rust = include_str!("../src/sys.rs");
    // Trailing commas (rustfmt) and "(void)" must not count as parameters.
    let arity = |args: &str| args.split(',').filter(|a| !matches!(a.trim(), "" | "void")).count();
    // "TH_API <type> name(args);" and "pub fn name(args) ...;"
    let decls = |text: &str, marker: &str| -> BTreeMap<String, usize> {
        text.split(marker)
            .skip(1)
            .map(|rest| {
                let open = rest.find('(').unwrap();
                let name = rest[..open].rsplit(|c: char| !(c.is_alphanumeric() || c == '_')).next().unwrap();
                let close = open + rest[open..].find(')').unwrap();
                (name.to_owned(), arity(&rest[open + 1..close]))
            })
            .filter(|(name, _)| name.starts_with("th_")) // skips "#define TH_API ..."
            .collect()
    };
    let c = decls(&header, "TH_API ");
    let r = decls(rust, "pub fn ");
    assert!(c.len() > 20, "parsed too few declarations from the header: {c:?}");
    assert_eq!(c, r, "header (left) and sys.rs (right) declare different functions");
}
