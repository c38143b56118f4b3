# Finds xxHash (Debian: libxxhash-dev) and defines the imported target
# xxhash::xxhash. Sets XXHash_FOUND, XXHash_INCLUDE_DIR, XXHash_LIBRARY.
find_path(XXHash_INCLUDE_DIR xxhash.h)
find_library(XXHash_LIBRARY NAMES xxhash)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(XXHash REQUIRED_VARS XXHash_LIBRARY XXHash_INCLUDE_DIR)
if(XXHash_FOUND AND NOT TARGET xxhash::xxhash)
  add_library(xxhash::xxhash UNKNOWN IMPORTED)
  set_target_properties(xxhash::xxhash PROPERTIES
    IMPORTED_LOCATION "${XXHash_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${XXHash_INCLUDE_DIR}")
endif()
mark_as_advanced(XXHash_INCLUDE_DIR XXHash_LIBRARY)
