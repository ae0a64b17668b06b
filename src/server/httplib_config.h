// cpp-httplib as Debian builds it (a shared library compiled with OpenSSL, zlib and
// Brotli support): these macros change the layout of httplib's classes, so every
// includer must see the same ones as libcpp-httplib.so (its pkg-config Cflags).
// Include this header, never <httplib.h> directly.
#pragma once

#ifndef CPPHTTPLIB_OPENSSL_SUPPORT
#define CPPHTTPLIB_OPENSSL_SUPPORT
#endif
#ifndef CPPHTTPLIB_ZLIB_SUPPORT
#define CPPHTTPLIB_ZLIB_SUPPORT
#endif
#ifndef CPPHTTPLIB_BROTLI_SUPPORT
#define CPPHTTPLIB_BROTLI_SUPPORT
#endif
#include <httplib.h>
