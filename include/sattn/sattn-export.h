/* sattn-export.h — which declarations libsattn exports.
 *
 * libsattn is built with hidden symbol visibility: only what the public
 * headers declare between SATTN_API_BEGIN and SATTN_API_END is exported
 * from libsattn.so; everything else (core/internal.h) stays inside the
 * library.  Included by <sattn/sattn.h>, do not include it directly.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#ifndef SATTN_EXPORT_H
#define SATTN_EXPORT_H

#if defined(__GNUC__) || defined(__clang__)
#define SATTN_API_BEGIN _Pragma ("GCC visibility push(default)")
#define SATTN_API_END _Pragma ("GCC visibility pop")
#else
#define SATTN_API_BEGIN
#define SATTN_API_END
#endif

#endif /* SATTN_EXPORT_H */
