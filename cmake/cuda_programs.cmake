# ndt_cuda_directory_options(): for a directory of nvcc-built programs (tests/programs/,
# tests/corpus/, bench/programs/). The project-wide warning (and sanitizer) options are
# host-compiler options nvcc rejects: they are kept for C and C++ there, and the warnings are
# handed to nvcc's host compiler instead (as errors under NDT_WERROR).
macro(ndt_cuda_directory_options)
  get_directory_property(ndt_inherited COMPILE_OPTIONS)
  set(ndt_options)
  foreach(ndt_option IN LISTS ndt_inherited)
    list(APPEND ndt_options "$<$<COMPILE_LANGUAGE:C,CXX>:${ndt_option}>")
  endforeach()
  list(APPEND ndt_options "$<$<COMPILE_LANGUAGE:CUDA>:-Xcompiler=-Wall,-Wextra,-Wshadow>")
  if(NDT_WERROR)
    list(APPEND ndt_options
      "$<$<COMPILE_LANGUAGE:CUDA>:-Werror=all-warnings;-Xcompiler=-Werror>")
  endif()
  set_directory_properties(PROPERTIES COMPILE_OPTIONS "${ndt_options}")
endmacro()
