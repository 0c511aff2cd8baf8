/* The receive path's per-span work in native code: the spans of an OTLP ExportTraceServiceRequest
 * read straight from its protobuf bytes into the columns of the spans table.
 *
 * `meritlens.collector.process._normalize` is the reference: it calls `scan` only for a body that upb has
 * already parsed as the request's lean view (so the wire format and every string field are valid),
 * and it gives the scanner everything that is decided per request or per distinct attribute:
 * resource and scope context, and the cache that turns a serialized KeyValue into its `_Attribute`
 * (parsing it with protobuf on a miss, which is where a bad attribute fails the whole request).
 * What the scanner does per span is what `_normalize._span_row` does for an ordinary span: hex IDs,
 * times, status, promotion of attributes to typed columns, the leftover attributes' JSON, the events'
 * JSON and the first streamed chunk. Any span it does not handle exactly that way (invalid IDs or
 * times, a limit to check, links, a kind or status code out of range, more attributes or events than
 * its fixed arrays hold, and, should it be given bytes the parse has not checked, a malformed event or
 * a name that is not UTF-8) gets placeholder values and is listed for the Python walk. A body it cannot
 * walk (groups) makes it return None, and Python normalizes the whole request.
 *
 * The module also holds the store's two other per-row loops: the key hashes of stored batches
 * (`hash_strings`, for `collector/store/_keyhash.py`) and the Bloom filter probes of the key filters and
 * locator (`bloom_add`, `bloom_test`, for `collector/store/_keyfilter.py`, whose numpy code they match bit
 * for bit).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    COL_TRACE_ID, COL_SPAN_ID, COL_PARENT, COL_NAME, COL_KIND, COL_START, COL_END, COL_STATUS_CODE,
    COL_STATUS_MESSAGE, COL_SERVICE, COL_SCOPE, COL_ATTRIBUTES, COL_RESOURCE, COL_EVENTS, COL_LINKS,
    N_BASE
};
#define MAX_PROMOTED 64
#define MAX_ATTRS 128 /* per span or event; more goes to the Python walk */
#define MAX_EVENTS 64

typedef struct { const uint8_t *p, *end; } Rd;

static int rd_varint(Rd *r, uint64_t *v) {
    uint64_t x = 0;
    for (int shift = 0; shift <= 63 && r->p < r->end; shift += 7) {
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) { *v = x; return 0; }
    }
    return -1;
}

static int rd_tag(Rd *r, uint32_t *field, int *wire) {
    uint64_t t;
    if (rd_varint(r, &t) || (t >> 3) == 0 || (t >> 3) > UINT32_MAX) return -1;
    *field = (uint32_t)(t >> 3);
    *wire = (int)(t & 7);
    return 0;
}

static int rd_len(Rd *r, Rd *out) {
    uint64_t n;
    if (rd_varint(r, &n) || n > (uint64_t)(r->end - r->p)) return -1;
    out->p = r->p;
    out->end = r->p + n;
    r->p += n;
    return 0;
}

static int rd_fixed64(Rd *r, uint64_t *v) {
    if (r->end - r->p < 8) return -1;
    uint64_t x = 0;
    for (int i = 7; i >= 0; i--) x = (x << 8) | r->p[i];
    *v = x;
    r->p += 8;
    return 0;
}

/* Skip a field of the given wire type; groups (3, 4) are left to the Python walk (-1). */
static int rd_skip(Rd *r, int wire) {
    uint64_t v;
    Rd s;
    switch (wire) {
    case 0: return rd_varint(r, &v);
    case 1: return rd_fixed64(r, &v);
    case 2: return rd_len(r, &s);
    case 5:
        if (r->end - r->p < 4) return -1;
        r->p += 4;
        return 0;
    default: return -1;
    }
}

static size_t rd_size(Rd s) { return (size_t)(s.end - s.p); }

/* Whether ``s`` is well-formed UTF-8 as protobuf requires of a string field (no overlong forms,
 * surrogates or code points past U+10FFFF). The receivers' parse has checked the strings the
 * scanner copies; the scanner checks them again so that it never depends on that. */
static int utf8_valid(Rd s) {
    const uint8_t *p = s.p, *end = s.end;
    while (p < end) {
        uint8_t c = *p;
        if (c < 0x80) { p++; continue; }
        int n;
        uint32_t cp;
        if (c >= 0xC2 && c <= 0xDF) { n = 1; cp = c & 0x1F; }
        else if (c >= 0xE0 && c <= 0xEF) { n = 2; cp = c & 0x0F; }
        else if (c >= 0xF0 && c <= 0xF4) { n = 3; cp = c & 0x07; }
        else return 0;
        if (end - p <= n) return 0;
        for (int i = 1; i <= n; i++) {
            if ((p[i] & 0xC0) != 0x80) return 0;
            cp = (cp << 6) | (p[i] & 0x3F);
        }
        if ((n == 2 && (cp < 0x800 || (cp >= 0xD800 && cp <= 0xDFFF))) || (n == 3 && (cp < 0x10000 || cp > 0x10FFFF)))
            return 0;
        p += n + 1;
    }
    return 1;
}

/* --- a growing text buffer ---------------------------------------------------------------------- */
typedef struct { char *data; size_t len, cap; } Buf;

static int buf_put(Buf *b, const char *s, size_t n) {
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 1024;
        while (cap < b->len + n) cap *= 2;
        char *data = PyMem_Realloc(b->data, cap);
        if (!data) { PyErr_NoMemory(); return -1; }
        b->data = data;
        b->cap = cap;
    }
    memcpy(b->data + b->len, s, n);
    b->len += n;
    return 0;
}

static int buf_char(Buf *b, char c) { return buf_put(b, &c, 1); }

static int buf_text(Buf *b, PyObject *text) {
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    return s ? buf_put(b, s, (size_t)n) : -1;
}

/* A JSON string as orjson writes it: quote, backslash and control characters escaped, the rest as is. */
static int buf_json_string(Buf *b, Rd s) {
    static const char hex[] = "0123456789abcdef";
    if (buf_char(b, '"')) return -1;
    for (const uint8_t *p = s.p; p < s.end; p++) {
        uint8_t c = *p;
        char esc[6];
        if (c == '"' || c == '\\') {
            esc[0] = '\\'; esc[1] = (char)c;
            if (buf_put(b, esc, 2)) return -1;
        } else if (c < 0x20) {
            char short_form = c == '\b' ? 'b' : c == '\t' ? 't' : c == '\n' ? 'n' : c == '\f' ? 'f' : c == '\r' ? 'r' : 0;
            if (short_form) {
                esc[0] = '\\'; esc[1] = short_form;
                if (buf_put(b, esc, 2)) return -1;
            } else {
                memcpy(esc, "\\u00", 4);
                esc[4] = hex[c >> 4]; esc[5] = hex[c & 15];
                if (buf_put(b, esc, 6)) return -1;
            }
        } else if (buf_char(b, (char)c)) {
            return -1;
        }
    }
    return buf_char(b, '"');
}

/* --- what one request's scan is given ----------------------------------------------------------- */
typedef struct {
    PyObject *attributes;      /* serialized KeyValue (bytes) -> _Attribute, a mapping */
    PyObject *first_chunk;     /* tuple of event names (bytes) that mark the first streamed chunk */
    Py_ssize_t n_promoted;
    Py_ssize_t role_slot, ttft_slot, target_slot, cost_slot;
    PyObject *role_key, *cost_key, *priced_by_key, *application_role; /* str */
    long long max_attributes;
    long long max_span_bytes;  /* -1: no span's texts can be over the byte limit */
    int price, fallback;
    int kinds[MAX_PROMOTED];   /* each promoted column's kind (K_*) */
} Plan;

/* One attribute as `_normalize._Attribute`: (key, json, column, rank, value, kept, slot). */
typedef struct { PyObject *key, *text; } Entry;

typedef struct {
    Entry items[MAX_ATTRS + 2];
    int n;
} Texts;

static int same_key(PyObject *a, PyObject *b) {
    if (a == b) return 1;
    if (PyObject_Hash(a) != PyObject_Hash(b)) return 0;
    return PyUnicode_Compare(a, b) == 0;
}

static int texts_find(Texts *t, PyObject *key) {
    for (int i = 0; i < t->n; i++)
        if (same_key(t->items[i].key, key)) return i;
    return -1;
}

/* texts[key] = text: a key already there keeps its position and takes the new text. */
static void texts_set(Texts *t, PyObject *key, PyObject *text) {
    int i = texts_find(t, key);
    if (i < 0) {
        i = t->n++;
        t->items[i].key = key;
    }
    t->items[i].text = text;
}

static int texts_json_object(Buf *b, Texts *t) {
    if (buf_char(b, '{')) return -1;
    for (int i = 0; i < t->n; i++) {
        if ((i && buf_char(b, ',')) || buf_text(b, t->items[i].text)) return -1;
    }
    return buf_char(b, '}');
}

/* --- Arrow columns ---------------------------------------------------------------------------------
 * Each column is built as the buffers of an Arrow array (validity bitmap, offsets, data), which
 * `_normalize` wraps with `pyarrow.Array.from_buffers`: no Python object per value. */
enum { K_STR, K_I8, K_I32, K_I64, K_F64, K_BOOL, N_KINDS };

typedef struct {
    int kind;
    Buf valid, offsets, data;
    Py_ssize_t n, nulls;
} Col;

static int put_bit(Buf *b, Py_ssize_t i, int on) {
    if ((i & 7) == 0 && buf_char(b, 0)) return -1;
    if (on) b->data[i >> 3] |= (char)(1 << (i & 7));
    return 0;
}

static int col_offset(Col *c) {
    if (c->data.len > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "a string column of one request is over 2 GiB");
        return -1;
    }
    int32_t end = (int32_t)c->data.len;
    return buf_put(&c->offsets, (const char *)&end, 4);
}

static int col_init(Col *c, int kind) {
    memset(c, 0, sizeof *c);
    c->kind = kind;
    return kind == K_STR ? col_offset(c) : 0;
}

static void col_free(Col *c) {
    PyMem_Free(c->valid.data);
    PyMem_Free(c->offsets.data);
    PyMem_Free(c->data.data);
}

static int col_null(Col *c) {
    static const char zeros[8] = {0};
    static const size_t width[N_KINDS] = {0, 1, 4, 8, 8, 0};
    if (put_bit(&c->valid, c->n, 0)) return -1;
    int rc = c->kind == K_STR ? col_offset(c) : c->kind == K_BOOL ? put_bit(&c->data, c->n, 0)
                                                                   : buf_put(&c->data, zeros, width[c->kind]);
    if (rc) return -1;
    c->nulls++;
    c->n++;
    return 0;
}

static int col_str(Col *c, const char *s, size_t n) {
    if (put_bit(&c->valid, c->n, 1) || buf_put(&c->data, s, n) || col_offset(c)) return -1;
    c->n++;
    return 0;
}

static int col_fixed(Col *c, const void *v, size_t width) {
    if (put_bit(&c->valid, c->n, 1) || buf_put(&c->data, v, width)) return -1;
    c->n++;
    return 0;
}

static int col_i8(Col *c, int8_t v) { return col_fixed(c, &v, 1); }
static int col_i64(Col *c, int64_t v) { return col_fixed(c, &v, 8); }
static int col_f64(Col *c, double v) { return col_fixed(c, &v, 8); }

static int col_hex(Col *c, Rd s) {
    static const char hex[] = "0123456789abcdef";
    char out[64];
    size_t n = rd_size(s);
    if (n > 32) return -1; /* IDs are 8 or 16 bytes here */
    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[s.p[i] >> 4];
        out[2 * i + 1] = hex[s.p[i] & 15];
    }
    return col_str(c, out, 2 * n);
}

static int col_text(Col *c, PyObject *text) {
    if (text == NULL || text == Py_None) return col_null(c);
    Py_ssize_t n;
    const char *s = PyUnicode_AsUTF8AndSize(text, &n);
    return s ? col_str(c, s, (size_t)n) : -1;
}

/* A Python value (a promoted attribute's typed value) in its column's kind; NULL or None: null. */
static int col_object(Col *c, PyObject *v) {
    if (v == NULL || v == Py_None) return col_null(c);
    switch (c->kind) {
    case K_STR: return col_text(c, v);
    case K_I64: {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) return -1;
        return col_i64(c, (int64_t)x);
    }
    case K_I32: {
        long long x = PyLong_AsLongLong(v);
        if (x == -1 && PyErr_Occurred()) return -1;
        if (x < INT32_MIN || x > INT32_MAX) {
            PyErr_SetString(PyExc_OverflowError, "a value is out of its int32 column's range");
            return -1;
        }
        int32_t y = (int32_t)x;
        return col_fixed(c, &y, 4);
    }
    case K_I8: {
        long x = PyLong_AsLong(v);
        if (x == -1 && PyErr_Occurred()) return -1;
        return col_i8(c, (int8_t)x);
    }
    case K_F64: {
        double x = PyFloat_AsDouble(v);
        if (x == -1.0 && PyErr_Occurred()) return -1;
        return col_f64(c, x);
    }
    case K_BOOL: {
        int x = PyObject_IsTrue(v);
        if (x < 0 || put_bit(&c->valid, c->n, 1) || put_bit(&c->data, c->n, x)) return -1;
        c->n++;
        return 0;
    }
    }
    return -1;
}

/* (validity or None, offsets or None, data, null count) for `pyarrow.Array.from_buffers`. */
static PyObject *col_buffers(Col *c) {
    PyObject *valid = c->nulls ? PyBytes_FromStringAndSize(c->valid.data, (Py_ssize_t)c->valid.len)
                               : (Py_INCREF(Py_None), Py_None);
    PyObject *offsets = c->kind == K_STR ? PyBytes_FromStringAndSize(c->offsets.data, (Py_ssize_t)c->offsets.len)
                                         : (Py_INCREF(Py_None), Py_None);
    PyObject *data = PyBytes_FromStringAndSize(c->data.data ? c->data.data : "", (Py_ssize_t)c->data.len);
    if (!valid || !offsets || !data) {
        Py_XDECREF(valid);
        Py_XDECREF(offsets);
        Py_XDECREF(data);
        return NULL;
    }
    return Py_BuildValue("(NNNn)", valid, offsets, data, c->nulls);
}

static int all_zero(Rd s) {
    for (const uint8_t *p = s.p; p < s.end; p++)
        if (*p) return 0;
    return 1;
}

typedef struct {
    Rd trace_id, span_id, parent, name, status_message;
    uint64_t kind, start, end, status_code;
    Rd attrs[MAX_ATTRS];
    int n_attrs;
    Rd events[MAX_EVENTS];
    int n_events;
    int n_links;
    int overflow; /* more attributes or events than the arrays hold */
} Span;

static int read_span(Rd r, Span *s) {
    memset(s, 0, sizeof *s);
    while (r.p < r.end) {
        uint32_t field;
        int wire;
        if (rd_tag(&r, &field, &wire)) return -1;
        Rd v;
        if (wire == 2 && (field == 1 || field == 2 || field == 4 || field == 5 || field == 9 || field == 11
                          || field == 13 || field == 15)) {
            if (rd_len(&r, &v)) return -1;
            switch (field) {
            case 1: s->trace_id = v; break;
            case 2: s->span_id = v; break;
            case 4: s->parent = v; break;
            case 5: s->name = v; break;
            case 9:
                if (s->n_attrs < MAX_ATTRS) s->attrs[s->n_attrs] = v; else s->overflow = 1;
                s->n_attrs++;
                break;
            case 11:
                if (s->n_events < MAX_EVENTS) s->events[s->n_events] = v; else s->overflow = 1;
                s->n_events++;
                break;
            case 13: s->n_links++; break;
            case 15: /* Status: occurrences merge, so later fields win one by one */
                while (v.p < v.end) {
                    uint32_t f;
                    int w;
                    if (rd_tag(&v, &f, &w)) return -1;
                    if (f == 2 && w == 2) {
                        if (rd_len(&v, &s->status_message)) return -1;
                    } else if (f == 3 && w == 0) {
                        if (rd_varint(&v, &s->status_code)) return -1;
                    } else if (rd_skip(&v, w)) {
                        return -1;
                    }
                }
                break;
            }
        } else if (wire == 0 && field == 6) {
            if (rd_varint(&r, &s->kind)) return -1;
        } else if (wire == 1 && (field == 7 || field == 8)) {
            if (rd_fixed64(&r, field == 7 ? &s->start : &s->end)) return -1;
        } else if (rd_skip(&r, wire)) {
            return -1;
        }
    }
    return 0;
}

/* The int32 a varint holds when read as an int32 (enum) field. */
static int32_t as_int32(uint64_t v) { return (int32_t)(uint32_t)v; }

/* Whether the scanner can normalize this span itself (0), or leaves it to the Python walk (1). */
static int needs_python(const Span *s, const Plan *plan, size_t span_bytes, int resource_problem) {
    size_t parent = rd_size(s->parent);
    int32_t kind = as_int32(s->kind), code = as_int32(s->status_code);
    return resource_problem || s->overflow || s->n_links
        || rd_size(s->trace_id) != 16 || all_zero(s->trace_id)
        || rd_size(s->span_id) != 8 || all_zero(s->span_id) || (parent && parent != 8)
        || s->start == 0 || s->end == 0 || s->end < s->start || s->end > (uint64_t)INT64_MAX
        || kind < 0 || kind > 5 || code < 0 || code > 2
        || (long long)s->n_attrs > plan->max_attributes
        || (plan->max_span_bytes >= 0 && (long long)span_bytes > plan->max_span_bytes)
        || !utf8_valid(s->name) || !utf8_valid(s->status_message);
}

typedef struct {
    Col *columns;               /* N_BASE + n_promoted */
    PyObject *python_spans;     /* list of (row, ri, si, pi) */
    PyObject *finish;           /* list of (row, needs target, needs price) */
    Py_ssize_t rows;
} Out;

static int append_steal(PyObject *list, PyObject *item) {
    if (!item) return -1;
    int rc = PyList_Append(list, item);
    Py_DECREF(item);
    return rc;
}

static int append_placeholder_row(Out *out, Py_ssize_t n_columns) {
    for (Py_ssize_t i = 0; i < n_columns; i++)
        if (col_null(&out->columns[i])) return -1;
    return 0;
}

/* --- serialized KeyValue -> _Attribute, remembered in C ----------------------------------------------
 * The same bounded memo as `_normalize._attributes` (whose misses decode the KeyValue), kept here too
 * so that a repeated attribute costs a hash and a memcmp instead of a bytes object and a dict look-up.
 * Only used with the GIL held; a miss calls into Python, which may let another thread in, so nothing
 * found before that call is used after it. Emptied whole when full, as the Python memo is. */
#define MEMO_SLOTS 16384 /* a power of two, twice the entries */
#define MEMO_ENTRIES 8192
#define MEMO_MAX_KEY 256

typedef struct {
    uint64_t hash;
    size_t len;
    uint8_t *key;      /* NULL: an empty slot */
    PyObject *value;
} MemoSlot;

static MemoSlot memo[MEMO_SLOTS];
static Py_ssize_t memo_count;
static PyObject *memo_owner; /* the mapping the memo's values came from (held, so its address stays its own) */

static uint64_t hash_bytes(const uint8_t *p, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ULL ^ n;
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, p, 8);
        h = (((h << 5) | (h >> 59)) ^ w) * 0x51AF14D4C3E6A8B9ULL;
        p += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, p, n);
    h = (((h << 5) | (h >> 59)) ^ w) * 0x51AF14D4C3E6A8B9ULL;
    return h ^ (h >> 29);
}

static void memo_clear(void) {
    for (Py_ssize_t i = 0; i < MEMO_SLOTS; i++) {
        if (memo[i].key) {
            PyMem_Free(memo[i].key);
            Py_DECREF(memo[i].value);
            memo[i].key = NULL;
            memo[i].value = NULL;
        }
    }
    memo_count = 0;
}

/* The slot holding raw (found) or the empty slot where it belongs. */
static MemoSlot *memo_slot(Rd raw, uint64_t hash) {
    size_t n = rd_size(raw);
    for (size_t i = (size_t)hash & (MEMO_SLOTS - 1);; i = (i + 1) & (MEMO_SLOTS - 1)) {
        MemoSlot *slot = &memo[i];
        if (!slot->key || (slot->hash == hash && slot->len == n && memcmp(slot->key, raw.p, n) == 0)) return slot;
    }
}

/* An attribute from the memo or the Python cache, checked to have the `_Attribute` shape; a new reference. */
static PyObject *lookup_attribute(const Plan *plan, Rd raw) {
    size_t n = rd_size(raw);
    uint64_t hash = 0;
    if (n <= MEMO_MAX_KEY) {
        if (memo_owner != plan->attributes) {
            memo_clear();
            Py_XDECREF(memo_owner);
            Py_INCREF(plan->attributes);
            memo_owner = plan->attributes;
        }
        hash = hash_bytes(raw.p, n);
        MemoSlot *slot = memo_slot(raw, hash);
        if (slot->key) {
            Py_INCREF(slot->value);
            return slot->value;
        }
    }
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw.p, (Py_ssize_t)n);
    if (!key) return NULL;
    PyObject *attr = PyObject_GetItem(plan->attributes, key);
    Py_DECREF(key);
    if (!attr) return NULL;
    if (!PyTuple_Check(attr) || PyTuple_GET_SIZE(attr) != 7) {
        Py_DECREF(attr);
        PyErr_SetString(PyExc_TypeError, "the attribute cache must give 7-tuples (_Attribute)");
        return NULL;
    }
    if (n <= MEMO_MAX_KEY && memo_owner == plan->attributes) {
        if (memo_count >= MEMO_ENTRIES) memo_clear();
        MemoSlot *slot = memo_slot(raw, hash); /* looked up again: another thread may have added it */
        if (!slot->key) {
            uint8_t *copy = PyMem_Malloc(n ? n : 1);
            if (copy) {
                memcpy(copy, raw.p, n);
                slot->key = copy;
                slot->len = n;
                slot->hash = hash;
                slot->value = attr;
                Py_INCREF(attr);
                memo_count++;
            }
        }
    }
    return attr;
}

#define EVENT_WALK 2 /* an event the scanner cannot read: its span is left to the Python walk */

/* The event's JSON object into ``b``; *first_chunk_s set when it marks the first chunk (want).
 * -1 on a Python error, EVENT_WALK for an event the Python walk must read (malformed, a name that
 * is not UTF-8, more attributes than the limit or the arrays). */
static int event_json(Buf *b, const Plan *plan, Rd ev, uint64_t span_start, int want, PyObject **first_chunk_s) {
    uint64_t t = 0;
    Rd name = {ev.p, ev.p};
    Rd attrs[MAX_ATTRS];
    int n = 0;
    while (ev.p < ev.end) {
        uint32_t field;
        int wire;
        if (rd_tag(&ev, &field, &wire)) return EVENT_WALK;
        if (field == 1 && wire == 1) {
            if (rd_fixed64(&ev, &t)) return EVENT_WALK;
        } else if ((field == 2 || field == 3) && wire == 2) {
            Rd v;
            if (rd_len(&ev, &v)) return EVENT_WALK;
            if (field == 2) {
                name = v;
            } else {
                if (n < MAX_ATTRS) attrs[n] = v;
                n++;
            }
        } else if (rd_skip(&ev, wire)) {
            return EVENT_WALK;
        }
    }
    if ((long long)n > plan->max_attributes || n > MAX_ATTRS || !utf8_valid(name)) return EVENT_WALK;
    char number[24];
    int digits = 0;
    char reversed[24];
    uint64_t rest = t;
    do {
        reversed[digits++] = (char)('0' + rest % 10);
        rest /= 10;
    } while (rest);
    for (int i = 0; i < digits; i++) number[i] = reversed[digits - 1 - i];
    if (buf_put(b, "{\"name\":", 8) || buf_json_string(b, name)
        || buf_put(b, ",\"time_unix_nano\":", 18) || buf_put(b, number, (size_t)digits)
        || buf_put(b, ",\"attributes\":", 14))
        return -1;
    PyObject *held[MAX_ATTRS];
    Texts texts;
    texts.n = 0;
    int rc = 0, k = 0;
    for (; k < n; k++) {
        held[k] = lookup_attribute(plan, attrs[k]);
        if (!held[k]) { rc = -1; break; }
        texts_set(&texts, PyTuple_GET_ITEM(held[k], 0), PyTuple_GET_ITEM(held[k], 1));
    }
    if (rc == 0) rc = texts_json_object(b, &texts) || buf_char(b, '}') ? -1 : 0;
    for (int i = 0; i < k; i++) Py_DECREF(held[i]);
    if (rc) return -1;
    if (want && t >= span_start) {
        Py_ssize_t names = PyTuple_GET_SIZE(plan->first_chunk);
        for (Py_ssize_t i = 0; i < names; i++) {
            PyObject *marker = PyTuple_GET_ITEM(plan->first_chunk, i);
            if (PyBytes_GET_SIZE(marker) == (Py_ssize_t)rd_size(name)
                && memcmp(PyBytes_AS_STRING(marker), name.p, rd_size(name)) == 0) {
                *first_chunk_s = PyFloat_FromDouble((double)(t - span_start) / 1e9);
                return *first_chunk_s ? 0 : -1;
            }
        }
    }
    return 0;
}

/* Normalize one span into the output columns; returns 1 when it turns out to need the Python walk
 * (nothing appended), 0 when its row was appended, -1 on error. */
static int span_row(Out *out, const Plan *plan, const Span *s, PyObject *resource, PyObject *scope_name, Buf *b,
                    Buf *attributes) {
    PyObject *attrs[MAX_ATTRS];
    PyObject *values[MAX_PROMOTED] = {0};
    long held_rank[MAX_PROMOTED];
    PyObject *held_key[MAX_PROMOTED], *held_text[MAX_PROMOTED];
    PyObject *first_chunk_s = NULL;
    Texts rest;
    rest.n = 0;
    int n = 0, rc = -1;
    Py_ssize_t np = plan->n_promoted;

    for (; n < s->n_attrs; n++) {
        PyObject *attr = attrs[n] = lookup_attribute(plan, s->attrs[n]);
        if (!attr) goto done;
        PyObject *key = PyTuple_GET_ITEM(attr, 0), *text = PyTuple_GET_ITEM(attr, 1);
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(attr, 6));
        if (slot == -1 && PyErr_Occurred()) { n++; goto done; }
        if (slot >= 0 && slot < np) {
            long rank = PyLong_AsLong(PyTuple_GET_ITEM(attr, 3));
            if (rank == -1 && PyErr_Occurred()) { n++; goto done; }
            if (!values[slot] || rank < held_rank[slot]) {
                if (values[slot] && texts_find(&rest, held_key[slot]) < 0)
                    texts_set(&rest, held_key[slot], held_text[slot]);
                values[slot] = PyTuple_GET_ITEM(attr, 4);
                held_rank[slot] = rank;
                held_key[slot] = key;
                held_text[slot] = text;
                if (!PyObject_IsTrue(PyTuple_GET_ITEM(attr, 5))) continue;
            }
        }
        texts_set(&rest, key, text);
    }
    PyObject *defaults = PyTuple_GET_ITEM(resource, 2);
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(defaults); i++) {
        PyObject *pair = PyTuple_GET_ITEM(defaults, i);
        Py_ssize_t slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(pair, 0));
        if (slot >= 0 && slot < np && !values[slot]) values[slot] = PyTuple_GET_ITEM(pair, 1);
    }
    if (!values[plan->role_slot] && texts_find(&rest, plan->role_key) < 0)
        values[plan->role_slot] = plan->application_role;

    int need_target = plan->fallback && !values[plan->target_slot];
    int need_price = plan->price && !values[plan->cost_slot] && texts_find(&rest, plan->cost_key) < 0;
    if (need_price && texts_find(&rest, plan->priced_by_key) >= 0) { rc = 1; goto done; }
    b->len = 0;
    if (s->n_events) {
        int want = values[plan->ttft_slot] == NULL;
        if (buf_char(b, '[')) goto done;
        for (int i = 0; i < s->n_events; i++) {
            PyObject *found = NULL;
            if (i && buf_char(b, ',')) goto done;
            int event = event_json(b, plan, s->events[i], s->start, want, &found);
            if (event == EVENT_WALK) { rc = 1; goto done; }
            if (event) goto done;
            if (found) { first_chunk_s = found; want = 0; }
        }
        if (buf_char(b, ']')) goto done;
        if (first_chunk_s) values[plan->ttft_slot] = first_chunk_s;
    }
    attributes->len = 0;
    if (rest.n && texts_json_object(attributes, &rest)) goto done;

    Py_ssize_t row = out->rows;
    Col *c = out->columns;
    if (col_hex(&c[COL_TRACE_ID], s->trace_id) || col_hex(&c[COL_SPAN_ID], s->span_id)
        || (rd_size(s->parent) ? col_hex(&c[COL_PARENT], s->parent) : col_null(&c[COL_PARENT]))
        || col_str(&c[COL_NAME], (const char *)s->name.p, rd_size(s->name))
        || col_i8(&c[COL_KIND], (int8_t)as_int32(s->kind))
        || col_i64(&c[COL_START], (int64_t)s->start) || col_i64(&c[COL_END], (int64_t)s->end)
        || col_i8(&c[COL_STATUS_CODE], (int8_t)as_int32(s->status_code))
        || (rd_size(s->status_message) ? col_str(&c[COL_STATUS_MESSAGE], (const char *)s->status_message.p,
                                                 rd_size(s->status_message))
                                       : col_null(&c[COL_STATUS_MESSAGE]))
        || col_text(&c[COL_SERVICE], PyTuple_GET_ITEM(resource, 0))
        || col_text(&c[COL_SCOPE], scope_name)
        || (rest.n ? col_str(&c[COL_ATTRIBUTES], attributes->data, attributes->len) : col_null(&c[COL_ATTRIBUTES]))
        || col_text(&c[COL_RESOURCE], PyTuple_GET_ITEM(resource, 1))
        || (s->n_events ? col_str(&c[COL_EVENTS], b->data, b->len) : col_null(&c[COL_EVENTS]))
        || col_null(&c[COL_LINKS]))
        goto done;
    for (Py_ssize_t i = 0; i < np; i++)
        if (col_object(&c[N_BASE + i], values[i])) goto done;
    if (need_target || need_price) {
        if (append_steal(out->finish, Py_BuildValue("(nii)", row, need_target, need_price))) goto done;
    }
    out->rows++;
    rc = 0;
done:
    Py_XDECREF(first_chunk_s);
    for (int i = 0; i < n && i < s->n_attrs; i++) Py_XDECREF(attrs[i]);
    return rc;
}

static int parse_plan(PyObject *t, Plan *p) {
    if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) != 16) {
        PyErr_SetString(PyExc_TypeError, "plan must be a 16-tuple (see _normalize._scan_plan)");
        return -1;
    }
    p->attributes = PyTuple_GET_ITEM(t, 0);
    p->first_chunk = PyTuple_GET_ITEM(t, 1);
    p->n_promoted = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 2));
    p->role_slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 3));
    p->ttft_slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 4));
    p->target_slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 5));
    p->cost_slot = PyLong_AsSsize_t(PyTuple_GET_ITEM(t, 6));
    p->role_key = PyTuple_GET_ITEM(t, 7);
    p->cost_key = PyTuple_GET_ITEM(t, 8);
    p->priced_by_key = PyTuple_GET_ITEM(t, 9);
    p->application_role = PyTuple_GET_ITEM(t, 10);
    p->max_attributes = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 11));
    p->max_span_bytes = PyLong_AsLongLong(PyTuple_GET_ITEM(t, 12));
    p->price = PyObject_IsTrue(PyTuple_GET_ITEM(t, 13));
    p->fallback = PyObject_IsTrue(PyTuple_GET_ITEM(t, 14));
    if (PyErr_Occurred()) return -1;
    if (!PyTuple_Check(p->first_chunk) || p->n_promoted < 0 || p->n_promoted > MAX_PROMOTED
        || p->role_slot < 0 || p->role_slot >= p->n_promoted || p->ttft_slot < 0 || p->ttft_slot >= p->n_promoted
        || p->target_slot < 0 || p->target_slot >= p->n_promoted || p->cost_slot < 0 || p->cost_slot >= p->n_promoted
        || !PyUnicode_Check(p->role_key) || !PyUnicode_Check(p->cost_key) || !PyUnicode_Check(p->priced_by_key)) {
        PyErr_SetString(PyExc_ValueError, "plan is not a valid scan plan");
        return -1;
    }
    PyObject *kinds = PyTuple_GET_ITEM(t, 15);
    if (!PyTuple_Check(kinds) || PyTuple_GET_SIZE(kinds) != p->n_promoted) {
        PyErr_SetString(PyExc_ValueError, "plan's column kinds must be a tuple, one per promoted column");
        return -1;
    }
    for (Py_ssize_t i = 0; i < p->n_promoted; i++) {
        long kind = PyLong_AsLong(PyTuple_GET_ITEM(kinds, i));
        if (kind < 0 || kind >= N_KINDS) {
            PyErr_Clear();
            PyErr_SetString(PyExc_ValueError, "plan's column kinds must be numbers of kinds the scanner knows");
            return -1;
        }
        p->kinds[i] = (int)kind;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(p->first_chunk); i++)
        if (!PyBytes_Check(PyTuple_GET_ITEM(p->first_chunk, i))) {
            PyErr_SetString(PyExc_TypeError, "first-chunk event names must be bytes");
            return -1;
        }
    return 0;
}

#define WALK_FAIL 1 /* a shape left to the Python walk */

/* The next occurrence of length-delimited field ``number`` in ``r`` (other fields skipped) into
 * ``out``: 1 when found, 0 at the end or when ``r`` is malformed (then *rc = WALK_FAIL). */
static int next_message(Rd *r, uint32_t number, Rd *out, int *rc) {
    int malformed = 0;
    while (r->p < r->end) {
        uint32_t field;
        int wire;
        if (rd_tag(r, &field, &wire)) { malformed = 1; break; }
        if (field == number && wire == 2) {
            if (!rd_len(r, out)) return 1;
            malformed = 1;
            break;
        }
        if (rd_skip(r, wire)) { malformed = 1; break; }
    }
    if (malformed) *rc = WALK_FAIL;
    return 0;
}

/* One span at (ri, si, pi): its row, or a placeholder row listed for the Python walk. */
static int scan_span(Out *out, const Plan *plan, Rd raw, Span *span, PyObject *resource, int resource_problem,
                     PyObject *scope_name, Py_ssize_t ri, Py_ssize_t si, Py_ssize_t pi, Buf *b, Buf *attributes) {
    if (read_span(raw, span)) return WALK_FAIL;
    int r = needs_python(span, plan, rd_size(raw), resource_problem)
        ? 1 : span_row(out, plan, span, resource, scope_name, b, attributes);
    if (r != 1) return r;
    if (append_steal(out->python_spans, Py_BuildValue("(nnnn)", out->rows, ri, si, pi))
        || append_placeholder_row(out, N_BASE + plan->n_promoted))
        return -1;
    out->rows++;
    return 0;
}

static int scan_body(Rd body, const Plan *plan, PyObject *resources, PyObject *scopes, Out *out, Buf *b,
                     Buf *attributes) {
    Span *span = PyMem_Malloc(sizeof(Span));
    if (!span) { PyErr_NoMemory(); return -1; }
    int rc = 0;
    Rd rs, ss, raw;
    for (Py_ssize_t ri = 0; rc == 0 && next_message(&body, 1, &rs, &rc); ri++) { /* resource_spans */
        if (ri >= PyList_GET_SIZE(resources) || ri >= PyList_GET_SIZE(scopes)) { rc = WALK_FAIL; break; }
        PyObject *resource = PyList_GET_ITEM(resources, ri), *scope_names = PyList_GET_ITEM(scopes, ri);
        if (!PyTuple_Check(resource) || PyTuple_GET_SIZE(resource) != 4 || !PyList_Check(scope_names)
            || !PyTuple_Check(PyTuple_GET_ITEM(resource, 2))) {
            PyErr_SetString(PyExc_TypeError, "resources must be (service, json, defaults, problem) tuples");
            rc = -1;
            break;
        }
        int resource_problem = PyObject_IsTrue(PyTuple_GET_ITEM(resource, 3));
        for (Py_ssize_t si = 0; rc == 0 && next_message(&rs, 2, &ss, &rc); si++) { /* scope_spans */
            if (si >= PyList_GET_SIZE(scope_names)) { rc = WALK_FAIL; break; }
            PyObject *scope_name = PyList_GET_ITEM(scope_names, si);
            for (Py_ssize_t pi = 0; rc == 0 && next_message(&ss, 2, &raw, &rc); pi++) /* spans */
                rc = scan_span(out, plan, raw, span, resource, resource_problem, scope_name, ri, si, pi, b, attributes);
        }
    }
    PyMem_Free(span);
    return rc;
}

static const int BASE_KINDS[N_BASE] = {
    K_STR, K_STR, K_STR, K_STR, K_I8, K_I64, K_I64, K_I8, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR, K_STR,
};

static PyObject *scan(PyObject *self, PyObject *args) {
    Py_buffer body;
    PyObject *plan_tuple, *resources, *scopes;
    if (!PyArg_ParseTuple(args, "y*OO!O!:scan", &body, &plan_tuple, &PyList_Type, &resources, &PyList_Type, &scopes))
        return NULL;
    Plan plan;
    Py_ssize_t allocated = 0;
    Out out = {0};
    Buf b = {0}, attributes = {0};
    PyObject *result = NULL;
    if (parse_plan(plan_tuple, &plan)) goto end;
    Py_ssize_t n_columns = N_BASE + plan.n_promoted;
    out.columns = PyMem_Calloc((size_t)n_columns, sizeof(Col));
    if (!out.columns) { PyErr_NoMemory(); goto end; }
    for (; allocated < n_columns; allocated++) {
        int kind = allocated < N_BASE ? BASE_KINDS[allocated] : plan.kinds[allocated - N_BASE];
        if (col_init(&out.columns[allocated], kind)) { allocated++; goto end; }
    }
    if (!(out.python_spans = PyList_New(0)) || !(out.finish = PyList_New(0))) goto end;
    Rd r = {(const uint8_t *)body.buf, (const uint8_t *)body.buf + body.len};
    int rc = scan_body(r, &plan, resources, scopes, &out, &b, &attributes);
    if (rc < 0) goto end;
    if (rc == WALK_FAIL) {
        result = Py_None;
        Py_INCREF(result);
        goto end;
    }
    PyObject *columns = PyList_New(n_columns);
    if (!columns) goto end;
    for (Py_ssize_t i = 0; i < n_columns; i++) {
        PyObject *buffers = col_buffers(&out.columns[i]);
        if (!buffers) { Py_DECREF(columns); goto end; }
        PyList_SET_ITEM(columns, i, buffers);
    }
    result = Py_BuildValue("(NnOO)", columns, out.rows, out.python_spans, out.finish);
end:
    for (Py_ssize_t i = 0; i < allocated; i++) col_free(&out.columns[i]);
    PyMem_Free(out.columns);
    Py_XDECREF(out.python_spans);
    Py_XDECREF(out.finish);
    PyMem_Free(b.data);
    PyMem_Free(attributes.data);
    PyBuffer_Release(&body);
    return result;
}

/* Key hashes for the store's key filters and locator: `hash_bytes` with a finalizer, so that both
 * 32-bit halves (the filters' first probe and step) are well mixed. */
static uint64_t key_hash(const uint8_t *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    h ^= h >> 33;
    h *= 0xFF51AFD7ED558CCDULL;
    h ^= h >> 33;
    h *= 0xC4CEB9FE1A85EC53ULL;
    return h ^ (h >> 33);
}

static PyObject *hash_strings(PyObject *self, PyObject *args) {
    PyObject *validity_obj;
    Py_buffer offsets, data, validity = {0};
    Py_ssize_t offset, length;
    int wide;
    if (!PyArg_ParseTuple(args, "Oy*y*nnp", &validity_obj, &offsets, &data, &offset, &length, &wide)) return NULL;
    PyObject *out = NULL;
    size_t width = wide ? 8 : 4;
    if (validity_obj != Py_None && PyObject_GetBuffer(validity_obj, &validity, PyBUF_SIMPLE) < 0) goto done;
    if (offset < 0 || length < 0 || (size_t)offsets.len / width < (size_t)offset + (size_t)length + 1 ||
        (validity.buf && (size_t)validity.len * 8 < (size_t)offset + (size_t)length)) {
        PyErr_SetString(PyExc_ValueError, "hash_strings: the buffers are shorter than offset + length");
        goto done;
    }
    out = PyBytes_FromStringAndSize(NULL, length * 8);
    if (!out) goto done;
    uint64_t *h = (uint64_t *)PyBytes_AS_STRING(out);
    const uint8_t *bits = validity.buf, *chars = data.buf;
    int bad = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < length && !bad; i++) {
        Py_ssize_t j = offset + i;
        if (bits && !(bits[j >> 3] >> (j & 7) & 1)) {
            h[i] = 0;
            continue;
        }
        int64_t a, b;
        if (wide) {
            memcpy(&a, (const char *)offsets.buf + 8 * j, 8);
            memcpy(&b, (const char *)offsets.buf + 8 * (j + 1), 8);
        } else {
            int32_t a32, b32;
            memcpy(&a32, (const char *)offsets.buf + 4 * j, 4);
            memcpy(&b32, (const char *)offsets.buf + 4 * (j + 1), 4);
            a = a32;
            b = b32;
        }
        if (a < 0 || b < a || b > data.len) {
            bad = 1;
            break;
        }
        h[i] = key_hash(chars + a, (size_t)(b - a));
    }
    Py_END_ALLOW_THREADS
    if (bad) {
        Py_CLEAR(out);
        PyErr_SetString(PyExc_ValueError, "hash_strings: an offset is outside the data buffer");
    }
done:
    if (validity.buf) PyBuffer_Release(&validity);
    PyBuffer_Release(&offsets);
    PyBuffer_Release(&data);
    return out;
}

/* Bloom filter probes for `collector/store/_keyfilter.py` (the same bit positions as its numpy code):
 * probe i of hash h is bit (low32(h) + i * (high32(h) | 1)) mod the filter's bits, a power of two. */
typedef struct { Py_buffer words, hashes; uint64_t mask; Py_ssize_t n; } Bloom;

static int bloom_open(Bloom *b, PyObject *words, PyObject *hashes, int writable) {
    memset(b, 0, sizeof *b);
    if (PyObject_GetBuffer(words, &b->words, writable ? PyBUF_WRITABLE : PyBUF_SIMPLE) < 0) return -1;
    if (PyObject_GetBuffer(hashes, &b->hashes, PyBUF_SIMPLE) < 0) {
        PyBuffer_Release(&b->words);
        return -1;
    }
    uint64_t bits = (uint64_t)b->words.len * 8;
    if (b->words.len < 8 || b->words.len % 8 || (bits & (bits - 1)) || b->hashes.len % 8) {
        PyBuffer_Release(&b->words);
        PyBuffer_Release(&b->hashes);
        PyErr_SetString(PyExc_ValueError, "bloom: the words must be a power of two of 64-bit words, the hashes uint64");
        return -1;
    }
    b->mask = bits - 1;
    b->n = b->hashes.len / 8;
    return 0;
}

static void bloom_close(Bloom *b) {
    PyBuffer_Release(&b->words);
    PyBuffer_Release(&b->hashes);
}

static PyObject *bloom_add(PyObject *self, PyObject *args) {
    PyObject *words, *hashes;
    int probes;
    Bloom b;
    if (!PyArg_ParseTuple(args, "OOi", &words, &hashes, &probes) || bloom_open(&b, words, hashes, 1) < 0) return NULL;
    uint64_t *w = b.words.buf;
    const uint64_t *h = b.hashes.buf;
    long long set = 0;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < b.n; i++) {
        uint64_t pos = h[i] & 0xFFFFFFFFULL, step = (h[i] >> 32) | 1;
        for (int k = 0; k < probes; k++, pos += step) {
            uint64_t *word = &w[(pos & b.mask) >> 6], bit = 1ULL << (pos & 63);
            set += !(*word & bit);
            *word |= bit;
        }
    }
    Py_END_ALLOW_THREADS
    bloom_close(&b);
    return PyLong_FromLongLong(set);
}

static PyObject *bloom_test(PyObject *self, PyObject *args) {
    PyObject *words, *hashes;
    int probes;
    Bloom b;
    if (!PyArg_ParseTuple(args, "OOi", &words, &hashes, &probes) || bloom_open(&b, words, hashes, 0) < 0) return NULL;
    PyObject *out = PyBytes_FromStringAndSize(NULL, b.n);
    if (out) {
        uint8_t *o = (uint8_t *)PyBytes_AS_STRING(out);
        const uint64_t *w = b.words.buf, *h = b.hashes.buf;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t i = 0; i < b.n; i++) {
            uint64_t pos = h[i] & 0xFFFFFFFFULL, step = (h[i] >> 32) | 1;
            int k = 0;
            for (; k < probes; k++, pos += step)
                if (!(w[(pos & b.mask) >> 6] >> (pos & 63) & 1)) break;
            o[i] = k == probes;
        }
        Py_END_ALLOW_THREADS
    }
    bloom_close(&b);
    return out;
}

static PyMethodDef methods[] = {
    {"scan", scan, METH_VARARGS,
     "scan(body, plan, resources, scopes) -> (columns, rows, python_spans, finish) or None.\n\n"
     "The spans of a protobuf ExportTraceServiceRequest as columns in `_normalize._ROW_LAYOUT` order,\n"
     "each (validity or None, offsets or None, data, null count): the buffers of an Arrow array;\n"
     "python_spans: (row, ri, si, pi) of placeholder rows the Python walk must fill or refuse;\n"
     "finish: (row, needs target fallback, needs pricing). None: a body the Python walk must take."},
    {"hash_strings", hash_strings, METH_VARARGS,
     "hash_strings(validity or None, offsets, data, offset, length, wide) -> bytes.\n\n"
     "A 64-bit hash (native byte order) of each string of an Arrow string array (`wide`: 64-bit offsets),\n"
     "0 for a null: the store's key hashes (`collector/store/_keyhash.py`)."},
    {"bloom_add", bloom_add, METH_VARARGS,
     "bloom_add(words, hashes, probes) -> int: set the probes' bits of each uint64 hash (`collector/store/_keyfilter.py`);\n"
     "the number of bits that were not set before."},
    {"bloom_test", bloom_test, METH_VARARGS,
     "bloom_test(words, hashes, probes) -> bytes: 1 where every probe's bit of the hash is set, else 0."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_spanscan", "Native span scanner for the collector's receive path.", -1, methods,
};

PyMODINIT_FUNC PyInit__spanscan(void) { return PyModule_Create(&module); }
