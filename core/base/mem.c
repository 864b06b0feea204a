/* SPDX-License-Identifier: LGPL-2.1-or-later */
/* Large blocks, given back to the system when freed.
 *
 * A model's matrices, a weights file's bytes and tensors, and a stream's
 * rings are large (megabytes) and live as long as a model or a stream.
 * From malloc, freeing them does not reliably return the memory: glibc
 * raises its mmap threshold (up to 32 MiB) whenever a large mapped block
 * is freed, after which blocks of that size come from its arenas, and the
 * arenas of other threads (an element's streaming thread, an
 * application's start threads) only shrink from their top, so after many
 * elements went away their peak could stay resident for good (even after
 * malloc_trim).  Blocks of SATTN_MEM_MAP_MIN bytes or more are therefore
 * mapped here directly and unmapped when freed; smaller ones come from
 * posix_memalign.  Either way the block starts at the asked alignment
 * and a small header just before it says how to free it. */

#include "base/base.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#define MEM_MAGIC UINT64_C (0x5341544e4d454d31) /* "SATNMEM1" */

typedef struct {
  uint64_t magic;
  void *base;    /* what to give back */
  size_t mapped; /* bytes mapped at base; 0: from posix_memalign */
  size_t pad;
} MemHeader;

static size_t
page_size (void)
{
  long p = sysconf (_SC_PAGESIZE);
  return p > 0 ? (size_t) p : 4096;
}

void *
sattn_mem_alloc (size_t size, size_t align)
{
  const size_t hdr = sizeof (MemHeader);
  if (align < hdr)
    align = hdr;
  if ((align & (align - 1)) != 0)
    return NULL;
  MemHeader h = { MEM_MAGIC, NULL, 0, 0 };
  char *p;

  if (size < SATTN_MEM_MAP_MIN) {
    /* The header fills the first `align` bytes; the block follows. */
    void *base = NULL;
    if (size > SIZE_MAX - align ||
        posix_memalign (&base, align, align + size) != 0)
      return NULL;
    p = (char *) base + align;
    h.base = base;
  } else {
    const size_t pg = page_size ();
    if (align < pg)
      align = pg;
    /* The header sits in the page before the block. */
    size_t len = sattn_size_add (size, 2 * align);
    if (len == SIZE_MAX)
      return NULL;
    void *base = mmap (NULL, len, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
      return NULL;
    uintptr_t at = ((uintptr_t) base + hdr + align - 1) &
                   ~(uintptr_t) (align - 1);
    p = (char *) at;
    h.base = base;
    h.mapped = len;
  }
  memcpy (p - hdr, &h, hdr);
  return p;
}

void *
sattn_mem_calloc (size_t n, size_t size, size_t align)
{
  size_t bytes = sattn_size_mul (n, size);
  if (bytes == SIZE_MAX)
    return NULL;
  void *p = sattn_mem_alloc (bytes, align);
  /* Mapped blocks come zeroed from the system. */
  if (p != NULL && bytes < SATTN_MEM_MAP_MIN)
    memset (p, 0, bytes);
  return p;
}

void
sattn_mem_free (void *p)
{
  if (p == NULL)
    return;
  MemHeader h;
  memcpy (&h, (char *) p - sizeof h, sizeof h);
  if (h.magic != MEM_MAGIC)
    abort (); /* not ours: freeing it would corrupt the heap */
  if (h.mapped != 0)
    munmap (h.base, h.mapped);
  else
    free (h.base);
}
