// Anchor of the precompiled header the gtest binaries share (cmake/LongserveHelpers.cmake,
// longserve_test_pch): the header is built as part of a target, and this executable (gtest_main,
// no tests) is that target.
#include <gtest/gtest.h>
