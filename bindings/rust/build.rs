// Links libtensorhub from the CMake build tree. The rpath lets tests and
// binaries run without LD_LIBRARY_PATH; the include dir is exported so the
// layout test compiles its C probe against the very header the library
// was built from.
use std::env;
use std::path::{Path, PathBuf};

fn dir_from_env(var: &str, default: &str) -> PathBuf {
    println!("cargo:rerun-if-env-changed={var}");
    let manifest = PathBuf::from(env::var("CARGO_MANIFEST_DIR").unwrap());
    let dir = env::var_os(var).map(PathBuf::from).unwrap_or_else(|| manifest.join(default));
    // rpath and -I must be absolute: tests run from other directories.
    dir.canonicalize().unwrap_or(dir)
}

fn main() {
    let lib = dir_from_env("TENSORHUB_LIB_DIR", "../../build");
    let include = dir_from_env("TENSORHUB_INCLUDE_DIR", "../../include");
    if !lib.join("libtensorhub.so").exists() {
        println!("cargo:warning=libtensorhub.so not found in {}; set TENSORHUB_LIB_DIR", lib.display());
    }
    println!("cargo:rustc-link-search=native={}", lib.display());
    println!("cargo:rustc-link-lib=dylib=tensorhub");
    println!("cargo:rustc-link-arg=-Wl,-rpath,{}", lib.display());
    println!("cargo:rustc-env=TENSORHUB_INCLUDE_DIR={}", include.display());
    // Dependent crates (`links = "tensorhub"`) can find the header too.
    println!("cargo:include={}", include.display());
    println!("cargo:rerun-if-changed={}", Path::new(&include).join("tensorhub/tensorhub.h").display());
}
