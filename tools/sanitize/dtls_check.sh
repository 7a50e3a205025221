#!/usr/bin/env bash
# dtls_check.sh: does this compiler's sanitizer runtime still need ASAN_OPTIONS=intercept_tls_get_addr=0 (set by
# `make test-sanitize` and `make test-sanitize-ci`, Makefile)?
#
# The defect (gcc 12's libsanitizer, LLVM's before 17): the __tls_get_addr interceptor takes a dynamic TLS block that
# begins 16 bytes into a page for a glibc 2.19 block and reads its range from the 16 bytes in front of it. Since glibc
# 2.25 ld.so mallocs the block, so those bytes are ASan's chunk header; LeakSanitizer then scans a bogus range, its
# tracer segfaults ("Tracer caught signal 11") and the process dies with "LeakSanitizer has encountered a fatal
# error" at exit. In hybridlm this hit MPI rank processes (the dynamic TLS of a library that Open MPI loads): one
# rank in 128 on average, depending on where its heap stood (docs/reliability.md, "Sanitizer builds").
#
# The check builds a tiny program with -fsanitize=address that steps ASan's 32-byte size class until the next small
# block will start 16 bytes into a page, then dlopens a library with 8 bytes of TLS and touches it, so ld.so
# allocates the TLS block there. Three runs: default options (the defect shows as the fatal error), with
# intercept_tls_get_addr=0 (clean exit), and with that option and one block leaked on purpose (LeakSanitizer must
# still report it).
#
# Usage: bash tools/sanitize/dtls_check.sh [compiler]    (default: gcc; clang works too)
# Exit status: 0 when the defect reproduces and the option cures it while leaks are still reported (the option is
# needed and right); 3 when the defect does not reproduce (a fixed runtime: the option may be dropped); 1 otherwise.
set -uo pipefail
CC="${1:-gcc}"
DIR="$(mktemp -d "${TMPDIR:-/tmp}/hlm-dtls-XXXXXX")"
trap 'rm -rf "$DIR"' EXIT

cat > "$DIR/tlslib.c" <<'EOF'
__thread long slot;  /* dlopen'd, so ld.so allocates this block with malloc at first use */
long* tls_slot(void) { return &slot; }
EOF
cat > "$DIR/main.c" <<'EOF'
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
void* volatile keep[100000]; /* every block stays reachable: only the deliberate leak below is a leak */
int main(int argc, char** argv) {
  /* the block ld.so allocates comes `ahead` small allocations after the ones made here (dlopen's own) */
  const int ahead = atoi(argv[1]);
  int n = 0;
  uintptr_t a = (uintptr_t)(keep[n++] = malloc(16)), b = (uintptr_t)(keep[n++] = malloc(16));
  const intptr_t step = (intptr_t)b - (intptr_t)a;
  while (n < 100000 && ((b + (uintptr_t)(ahead * step)) & 4095) != 16) b = (uintptr_t)(keep[n++] = malloc(16));
  void* h = dlopen(argv[2], RTLD_NOW);
  if (!h) { fprintf(stderr, "dlopen: %s\n", dlerror()); return 2; }
  long* (*get)(void) = (long* (*)(void))dlsym(h, "tls_slot");
  const uintptr_t tls = (uintptr_t)get();
  fprintf(stderr, "TLS block at 0x%lx (0x%lx into its page)\n", (unsigned long)tls, (unsigned long)(tls & 4095));
  if (argc > 3) keep[0] = 0; /* the deliberate leak */
  return (tls & 4095) == 16 ? 0 : 4;
}
EOF
"$CC" -O1 -g -fPIC -shared "$DIR/tlslib.c" -o "$DIR/libtlslib.so" || exit 1
"$CC" -O1 -g -fsanitize=address "$DIR/main.c" -o "$DIR/dtls" -ldl || exit 1

# How many small allocations dlopen makes before the TLS block depends on the C library: find the count that puts the
# block 16 bytes into a page (leak checking off while searching).
ahead=""
for k in 1 2 3 4 5 6 7 8; do
  if ASAN_OPTIONS=detect_leaks=0 "$DIR/dtls" "$k" "$DIR/libtlslib.so" 2> /dev/null; then ahead=$k; break; fi
done
if [ -z "$ahead" ]; then
  echo "dtls_check: could not place the TLS block 16 bytes into a page; inconclusive"
  exit 1
fi

ASAN_OPTIONS=detect_leaks=1 "$DIR/dtls" "$ahead" "$DIR/libtlslib.so" > "$DIR/default.log" 2>&1
rc_default=$?
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 "$DIR/dtls" "$ahead" "$DIR/libtlslib.so" > "$DIR/fixed.log" 2>&1
rc_fixed=$?
ASAN_OPTIONS=detect_leaks=1:intercept_tls_get_addr=0 "$DIR/dtls" "$ahead" "$DIR/libtlslib.so" leak > "$DIR/leak.log" 2>&1
rc_leak=$?

fatal=$(grep -c 'LeakSanitizer has encountered a fatal error' "$DIR/default.log")
echo "compiler: $("$CC" --version | head -1)"
echo "default options:            exit $rc_default; $(grep -h 'Tracer caught' "$DIR/default.log" || echo 'no tracer crash')"
echo "intercept_tls_get_addr=0:   exit $rc_fixed; $(grep -c 'ERROR: LeakSanitizer' "$DIR/fixed.log") leak reports"
echo "same, one block leaked:     exit $rc_leak; $(grep -h 'SUMMARY' "$DIR/leak.log" || echo 'no leak report')"
if [ "$fatal" -eq 0 ] && [ "$rc_default" -eq 0 ]; then
  echo "dtls_check: the defect does not reproduce with $CC: intercept_tls_get_addr=0 is no longer needed"
  exit 3
fi
if [ "$fatal" -gt 0 ] && [ "$rc_fixed" -eq 0 ] && [ "$rc_leak" -ne 0 ] && grep -q 'SUMMARY: AddressSanitizer: 16 byte' "$DIR/leak.log"; then
  echo "dtls_check: defect reproduced; intercept_tls_get_addr=0 avoids it and leaks are still reported"
  exit 0
fi
echo "dtls_check: unexpected outcome; logs:"
cat "$DIR/default.log" "$DIR/fixed.log" "$DIR/leak.log"
exit 1
