# Finds mbedTLS's crypto library (libmbedcrypto), which the control plane's
# message authentication uses (HMAC-SHA256, src/wire/auth.cpp).
#
# Imported target:
#   MbedTLS::mbedcrypto
# Result variables:
#   MbedTLS_FOUND, MbedTLS_VERSION, MbedTLS_INCLUDE_DIR, MbedTLS_CRYPTO_LIBRARY
# Hints: MbedTLS_ROOT (CMake's <Package>_ROOT), or CMAKE_PREFIX_PATH.

find_path(MbedTLS_INCLUDE_DIR NAMES mbedtls/md.h)
find_library(MbedTLS_CRYPTO_LIBRARY NAMES mbedcrypto)

# 2.x keeps the version in version.h, 3.x in build_info.h.
foreach(_th_mbed_header mbedtls/build_info.h mbedtls/version.h)
  if(MbedTLS_INCLUDE_DIR AND NOT MbedTLS_VERSION AND EXISTS "${MbedTLS_INCLUDE_DIR}/${_th_mbed_header}")
    file(STRINGS "${MbedTLS_INCLUDE_DIR}/${_th_mbed_header}" _th_mbed_version
         REGEX "^#define[ \t]+MBEDTLS_VERSION_STRING[ \t]+\"[0-9.]+\"")
    if(_th_mbed_version)
      string(REGEX REPLACE ".*\"([0-9.]+)\".*" "\\1" MbedTLS_VERSION "${_th_mbed_version}")
    endif()
  endif()
endforeach()

include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(MbedTLS
  REQUIRED_VARS MbedTLS_CRYPTO_LIBRARY MbedTLS_INCLUDE_DIR
  VERSION_VAR MbedTLS_VERSION)

if(MbedTLS_FOUND AND NOT TARGET MbedTLS::mbedcrypto)
  add_library(MbedTLS::mbedcrypto UNKNOWN IMPORTED)
  set_target_properties(MbedTLS::mbedcrypto PROPERTIES
    IMPORTED_LOCATION "${MbedTLS_CRYPTO_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${MbedTLS_INCLUDE_DIR}")
endif()
mark_as_advanced(MbedTLS_INCLUDE_DIR MbedTLS_CRYPTO_LIBRARY)
