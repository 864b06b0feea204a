/* The one metadata parser: every key of every model (layers and whole
 * models alike) is read here, with one vocabulary (io/io.h, SattnMeta):
 *   booleans  1, 0, true, false (any case);
 *   integers  decimal digits only (no sign, no spaces), within a range;
 *   numbers   a finite decimal or exponent number ([-]d[.d][e[+-]d]),
 *             within a range (no spaces, no hex, no nan / inf);
 *   words     one of a list (any case);
 *   ranges    two numbers separated by one space, lo <= hi.
 * A value outside the vocabulary or the range is refused with the key,
 * the value and what is accepted.
 *
 * SPDX-License-Identifier: LGPL-2.1-or-later
 */
#include "io/io.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *
sattn_meta_value (const SattnMeta *m, const char *key)
{
  char *full = g_strconcat (m->prefix, key, NULL);
  const char *v = sattn_tensor_file_metadata (m->f, full);
  g_free (full);
  return v;
}

static SattnStatus
refuse (const SattnMeta *m, const char *key, const char *v, const char *want)
{
  ShowBuf sb;
  return sattn_io_fail (SATTN_E_INVAL, m->err, m->err_len,
                        "metadata '%s%s' is '%s'; expected %s", m->prefix, key,
                        sattn_io_show (&sb, v), want);
}

SattnStatus
sattn_meta_bool (const SattnMeta *m, const char *key, int *out, int *found)
{
  const char *v = sattn_meta_value (m, key);
  if (found)
    *found = v != NULL;
  if (v == NULL)
    return SATTN_OK;
  if (strcmp (v, "1") == 0 || g_ascii_strcasecmp (v, "true") == 0)
    *out = 1;
  else if (strcmp (v, "0") == 0 || g_ascii_strcasecmp (v, "false") == 0)
    *out = 0;
  else
    return refuse (m, key, v, "1, 0, true or false");
  return SATTN_OK;
}

SattnStatus
sattn_meta_uint (const SattnMeta *m, const char *key, uint64_t lo, uint64_t hi,
                 uint64_t *out, int *found)
{
  const char *v = sattn_meta_value (m, key);
  char want[96];
  guint64 u = 0;
  size_t i;

  if (found)
    *found = v != NULL;
  if (v == NULL)
    return SATTN_OK;
  g_snprintf (want, sizeof want,
              "a whole number from %" G_GUINT64_FORMAT " to %" G_GUINT64_FORMAT
              " (digits only)",
              (guint64) lo, (guint64) hi);
  for (i = 0; v[i] != '\0'; i++)
    if (!g_ascii_isdigit (v[i]))
      return refuse (m, key, v, want);
  if (i == 0 || i > 20 || !g_ascii_string_to_unsigned (v, 10, lo, hi, &u, NULL))
    return refuse (m, key, v, want);
  *out = u;
  return SATTN_OK;
}

/* Whether v is [-]digits[.digits][(e|E)[+-]digits] (or .digits). */
static int
number_syntax (const char *v)
{
  size_t i = 0, digits = 0;
  if (v[i] == '-')
    i++;
  while (g_ascii_isdigit (v[i]))
    i++, digits++;
  if (v[i] == '.') {
    i++;
    while (g_ascii_isdigit (v[i]))
      i++, digits++;
  }
  if (digits == 0)
    return 0;
  if (v[i] == 'e' || v[i] == 'E') {
    i++;
    if (v[i] == '+' || v[i] == '-')
      i++;
    if (!g_ascii_isdigit (v[i]))
      return 0;
    while (g_ascii_isdigit (v[i]))
      i++;
  }
  return v[i] == '\0';
}

/* text (v or a part of it) as a finite number in the range, or v
 * refused. */
static SattnStatus
number (const SattnMeta *m, const char *key, const char *v, const char *text,
        const SattnMetaRange *r, double *out)
{
  char want[160];
  double d = 0.0;
  if (number_syntax (text))
    d = g_ascii_strtod (text, NULL);
  int ok = number_syntax (text) && isfinite (d) &&
           (r->lo_open ? d > r->lo : d >= r->lo) &&
           (r->hi_open ? d < r->hi : d <= r->hi);
  if (ok) {
    *out = d;
    return SATTN_OK;
  }
  if (isinf (r->hi))
    g_snprintf (want, sizeof want, "a finite number %s %g",
                r->lo_open ? ">" : ">=", r->lo);
  else
    g_snprintf (want, sizeof want, "a finite number %s %g and %s %g",
                r->lo_open ? ">" : ">=", r->lo, r->hi_open ? "<" : "<=", r->hi);
  return refuse (m, key, v, want);
}

SattnStatus
sattn_meta_double (const SattnMeta *m, const char *key, const SattnMetaRange *r,
                   double *out, int *found)
{
  const char *v = sattn_meta_value (m, key);
  if (found)
    *found = v != NULL;
  if (v == NULL)
    return SATTN_OK;
  return number (m, key, v, v, r, out);
}

SattnStatus
sattn_meta_pair (const SattnMeta *m, const char *key, const SattnMetaRange *r,
                 double out[2], int *found)
{
  const char *v = sattn_meta_value (m, key);
  if (found)
    *found = v != NULL;
  if (v == NULL)
    return SATTN_OK;
  const char *sp = strchr (v, ' ');
  char want[200];
  g_snprintf (want, sizeof want,
              "two finite numbers 'lo hi' (one space between), %g <= lo <= hi",
              r->lo);
  if (sp == NULL || strchr (sp + 1, ' ') != NULL)
    return refuse (m, key, v, want);
  char *first = g_strndup (v, (gsize) (sp - v));
  double a = 0.0, b = 0.0;
  SattnStatus st = number (m, key, v, first, r, &a);
  if (st == SATTN_OK)
    st = number (m, key, v, sp + 1, r, &b);
  g_free (first);
  if (st == SATTN_OK && a > b)
    st = refuse (m, key, v, want);
  if (st == SATTN_OK) {
    out[0] = a;
    out[1] = b;
  }
  return st;
}

SattnStatus
sattn_meta_word (const SattnMeta *m, const char *key, const char *const *words,
                 size_t n, int *out, int *found)
{
  const char *v = sattn_meta_value (m, key);
  if (found)
    *found = v != NULL;
  if (v == NULL)
    return SATTN_OK;
  for (size_t k = 0; k < n; k++)
    if (g_ascii_strcasecmp (v, words[k]) == 0) {
      *out = (int) k;
      return SATTN_OK;
    }
  GString *s = g_string_new ("one of ");
  for (size_t k = 0; k < n; k++)
    g_string_append_printf (s, "%s%s", k ? ", " : "", words[k]);
  SattnStatus st = refuse (m, key, v, s->str);
  g_string_free (s, TRUE);
  return st;
}
