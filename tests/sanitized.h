/* SANITIZED: 1 in a build with AddressSanitizer or ThreadSanitizer, whose
 * allocators keep freed memory (RSS is theirs to decide there). */
#ifndef PDX_TEST_SANITIZED_H
#define PDX_TEST_SANITIZED_H

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif

#endif
