# Writes OUTPUT, a C++ file defining `const char *const th::<NAME>` with the
# text of INPUT, so that a file shipped with the library needs no install path.
# Usage: cmake -DINPUT=... -DOUTPUT=... -DNAME=... -P embed_text.cmake
file(READ "${INPUT}" _text)
set(_delim "th_embed")
string(FIND "${_text}" ")${_delim}\"" _clash)
if(NOT _clash EQUAL -1)
  message(FATAL_ERROR "${INPUT} contains the raw-string delimiter )${_delim}\"")
endif()
file(WRITE "${OUTPUT}.tmp" "// Generated from ${INPUT} by cmake/embed_text.cmake. Do not edit.\nnamespace th {\nextern const char *const ${NAME};\nconst char *const ${NAME} = R\"${_delim}(${_text})${_delim}\";\n}  // namespace th\n")
file(COPY_FILE "${OUTPUT}.tmp" "${OUTPUT}" ONLY_IF_DIFFERENT)
file(REMOVE "${OUTPUT}.tmp")
