# Unity build (-DLONGSERVE_UNITY=ON; scripts/setup.sh turns it on for its one-shot builds): each
# target's sources compile in batches of CMAKE_UNITY_BUILD_BATCH_SIZE files, so the headers
# (nlohmann/json, fmt, gtest) are parsed and their templates instantiated and optimised once per
# batch instead of once per file -- the bulk of a GCC -O3 build's time. Development builds leave it
# off (an edit recompiles one file, not its batch), and the clang tree of scripts/setup.sh leaves
# it off too, so every file still compiles on its own there (include-what-you-use stays checked).
#
# A file whose internal names (anonymous namespace, static) clash with another file of its target
# is compiled on its own: list it here with the folder of the CMakeLists.txt that adds it. The
# error such a clash gives under LONGSERVE_UNITY is "redefinition of ..." (or GCC's
# -Wsubobject-linkage) in a Unity/unity_N_cxx.cxx file.
set(longserve_unity_alone
  src/kernels      cpu/attention.cpp
  src/kernels      cpu/page_select.cpp
  src/kernels      cpu/shared_prefix_attention.cpp
  src/model        shared_prefix_step.cpp
  src/structured   regex_grammar.cpp
  src/tools        commands/calibrate.cpp
  src/server       http_transport.cpp
  tests/kernels    attention_quant_test.cpp
  tests/kernels    kv_append_test.cpp
  tests/kernels    shared_prefix_test.cpp
  tests/model      shared_prefix_engine_test.cpp
  tests/server     server_chat_test.cpp
  bench/kernels    shared_prefix_bench.cpp
  src/kernels/cuda linear.cpp
  tests/cuda       fp8_linear_test.cpp
  tests/cuda       page_save_test.cpp
  tests/cuda       shared_prefix_model_test.cpp
  tests/cuda       tp_all_reduce_logits_test.cpp
  bench/cuda       bench_select.cpp
  bench/cuda       bench_fp8_linear.cpp
  bench/cuda       bench_shared_prefix.cpp)

function(longserve_unity_exclusions)
  list(LENGTH longserve_unity_alone n)
  math(EXPR last "${n} - 1")
  foreach(i RANGE 0 ${last} 2)
    math(EXPR j "${i} + 1")
    list(GET longserve_unity_alone ${i} dir)
    list(GET longserve_unity_alone ${j} file)
    if(EXISTS ${PROJECT_SOURCE_DIR}/${dir}/${file} AND IS_DIRECTORY ${PROJECT_BINARY_DIR}/${dir})
      set_source_files_properties(${PROJECT_SOURCE_DIR}/${dir}/${file}
        DIRECTORY ${PROJECT_SOURCE_DIR}/${dir} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
    endif()
  endforeach()
endfunction()
