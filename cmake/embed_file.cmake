# cmake -DINPUT=<file> -DOUTPUT=<header> -DNAME=<identifier> -P embed_file.cmake
# Writes a header defining `alignas(8) inline constexpr unsigned char NAME[]` with INPUT's bytes
# (8-byte aligned, as the driver wants a fat binary image).
file(READ "${INPUT}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "((0x[0-9a-f][0-9a-f],){16})" "\\1\n    " bytes "${bytes}")
get_filename_component(input_name "${INPUT}" NAME)
file(WRITE "${OUTPUT}.tmp"
  "// Generated from ${input_name} by cmake/embed_file.cmake; do not edit.\n"
  "#pragma once\n\n"
  "alignas(8) inline constexpr unsigned char ${NAME}[] = {\n    ${bytes}\n};\n")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
