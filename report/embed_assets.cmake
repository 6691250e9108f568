# cmake -DOUTPUT=<file.cpp> -DCHART_JS=<chart.umd.min.js> -DCHART_PACKAGE=<package.json>
#       -DTEMPLATE=<template.html> -P embed_assets.cmake
# Writes the C++ source that defines report/assets.hpp: each file as a byte array.
foreach(var OUTPUT CHART_JS CHART_PACKAGE TEMPLATE)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_assets.cmake: -D${var}=... is required")
  endif()
endforeach()

function(byte_array file out_var size_var)
  if(NOT EXISTS "${file}")
    message(FATAL_ERROR "ktune report: ${file} is missing; run scripts/install-deps.sh")
  endif()
  file(READ "${file}" hex HEX)
  string(LENGTH "${hex}" hex_length)
  math(EXPR size "${hex_length} / 2")
  # 32 bytes per line keeps the written source readable by compilers and editors alike.
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
  string(REGEX REPLACE "((0x..,){32})" "\\1\n" bytes "${bytes}")
  set(${out_var} "${bytes}" PARENT_SCOPE)
  set(${size_var} "${size}" PARENT_SCOPE)
endfunction()

byte_array("${CHART_JS}" chart_bytes chart_size)
byte_array("${TEMPLATE}" template_bytes template_size)
file(READ "${CHART_PACKAGE}" package_text)
string(JSON chart_version GET "${package_text}" version)

set(text "// Written by report/embed_assets.cmake from ${CHART_JS} and ${TEMPLATE}.\n")
string(APPEND text "#include \"report/assets.hpp\"\n\nnamespace ktune::report::assets {\n\n")
string(APPEND text "const unsigned char k_chart_js[] = {\n${chart_bytes}\n};\n")
string(APPEND text "const std::size_t k_chart_js_size = ${chart_size};\n")
string(APPEND text "const char k_chart_js_version[] = \"${chart_version}\";\n\n")
string(APPEND text "const unsigned char k_template[] = {\n${template_bytes}\n};\n")
string(APPEND text "const std::size_t k_template_size = ${template_size};\n\n")
string(APPEND text "} // namespace ktune::report::assets\n")
file(WRITE "${OUTPUT}.tmp" "${text}")
file(RENAME "${OUTPUT}.tmp" "${OUTPUT}")
