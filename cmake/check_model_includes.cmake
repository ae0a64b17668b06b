# The device seam, checked: no file of the model module (src/model, the architectures in
# src/model/arch included) includes a device's kernels or a backend implementation. Model code
# reaches kernels only through backend/backend.h.
#   cmake -DSOURCE_DIR=<repo> -P cmake/check_model_includes.cmake
file(GLOB_RECURSE files ${SOURCE_DIR}/src/model/*.h ${SOURCE_DIR}/src/model/*.cc)
set(bad "")
foreach(f ${files})
  file(STRINGS ${f} lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<](kernels/(cpu|cuda)/|backend/(cpu|cuda)_)")
  foreach(line ${lines})
    string(REPLACE "${SOURCE_DIR}/" "" rel ${f})
    list(APPEND bad "${rel}: ${line}")
  endforeach()
endforeach()
list(LENGTH files count)
if(count EQUAL 0)
  message(FATAL_ERROR "no model sources found under ${SOURCE_DIR}/src/model")
endif()
if(bad)
  string(REPLACE ";" "\n  " bad "${bad}")
  message(FATAL_ERROR "model code includes device code (call the Backend instead):\n  ${bad}")
endif()
message(STATUS "${count} model files include no device kernels")
