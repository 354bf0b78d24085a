/* The compiled fast path of gregor.spark.record_scan: walk the records of one
 * decompressed v2 record batch and append them to Arrow column buffers.
 *
 * gregor/spark/record_scan.py holds the contract (column and cursor layout) and the
 * pure-Python version of the same function, which the tests hold this one to.  The
 * loop touches no Python object, so it runs without the GIL.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

enum {
    COL_OFFSET, COL_TIMESTAMP, COL_TIMESTAMP_TYPE,
    COL_KEY_VALIDITY, COL_KEY_OFFSETS, COL_KEY_DATA,
    COL_VALUE_VALIDITY, COL_VALUE_OFFSETS, COL_VALUE_DATA,
    COL_HEADERS_VALIDITY, COL_HEADERS_OFFSETS,
    COL_HKEY_OFFSETS, COL_HKEY_DATA,
    COL_HVALUE_VALIDITY, COL_HVALUE_OFFSETS, COL_HVALUE_DATA,
    N_COLUMNS
};
#define FIRST_HEADER_COLUMN COL_HEADERS_VALIDITY

enum {
    CUR_ROW, CUR_KEY_POS, CUR_VALUE_POS, CUR_HEADER_ROW, CUR_HKEY_POS, CUR_HVALUE_POS,
    CUR_KEY_NULLS, CUR_VALUE_NULLS, CUR_HEADERS_NULLS, CUR_HVALUE_NULLS,
    N_CURSOR
};

#define TIMESTAMP_TYPE_MASK 0x08

typedef enum {
    OK = 0, ERR_TRUNCATED, ERR_VARINT, ERR_LENGTH, ERR_FIELD, ERR_HEADER_COUNT,
    ERR_MISMATCH, ERR_TRAILING, ERR_ROOM, ERR_INT32
} scan_error;

static const char *messages[] = {
    "", "record data ends inside a record", "varint longer than 10 bytes",
    "record length does not fit the batch", "field runs past the end of its record",
    "negative header count", "record length disagrees with its fields",
    "bytes after the last record", "column buffers too small for the batch",
    "column data over 2 GiB",
};

typedef struct {
    uint8_t *p;
    Py_ssize_t len;
} out_buf;

static inline scan_error read_varint(const uint8_t *data, Py_ssize_t *pos, Py_ssize_t end,
                                     int64_t *out)
{
    uint64_t result = 0;
    int shift = 0;
    while (*pos < end) {
        uint8_t byte = data[(*pos)++];
        result |= (uint64_t)(byte & 0x7F) << shift;
        if (byte < 0x80) {
            *out = (int64_t)((result >> 1) ^ (~(result & 1) + 1));
            return OK;
        }
        shift += 7;
        if (shift > 63)
            return ERR_VARINT;
    }
    return ERR_TRUNCATED;
}

static inline void set_bit(uint8_t *bitmap, int64_t index, int valid)
{
    if (valid)
        bitmap[index >> 3] |= (uint8_t)(1u << (index & 7));
    else
        bitmap[index >> 3] &= (uint8_t)~(1u << (index & 7));
}

/* A nullable byte string at *pos (length varint, -1 for null); sets *start and *length. */
static inline scan_error read_bytes(const uint8_t *data, Py_ssize_t *pos, Py_ssize_t limit,
                                    Py_ssize_t *start, int64_t *length)
{
    scan_error err = read_varint(data, pos, limit, length);
    if (err)
        return err;
    if (*length < -1)
        return ERR_FIELD;
    *start = *pos;
    if (*length >= 0) {
        if (*length > limit - *pos)
            return ERR_FIELD;
        *pos += (Py_ssize_t)*length;
    }
    return OK;
}

/* Append one nullable value to a (validity, int32 offsets, data) column. */
static inline scan_error append_value(out_buf *validity, out_buf *offsets, out_buf *data,
                                      int64_t row, int64_t *pos, int64_t *nulls,
                                      const uint8_t *src, int64_t length)
{
    if ((row >> 3) >= validity->len || (row + 2) * 4 > offsets->len)
        return ERR_ROOM;
    if (length < 0) {
        set_bit(validity->p, row, 0);
        (*nulls)++;
    } else {
        if (*pos + length > data->len)
            return ERR_ROOM;
        set_bit(validity->p, row, 1);
        memcpy(data->p + *pos, src, (size_t)length);
        *pos += length;
    }
    if (*pos > INT32_MAX)
        return ERR_INT32;
    ((int32_t *)offsets->p)[row + 1] = (int32_t)*pos;
    return OK;
}

static scan_error scan(const uint8_t *data, Py_ssize_t end, int64_t count, int64_t base_offset,
                       int64_t base_timestamp, int64_t append_time, int log_append_time,
                       int64_t first, int64_t last, int headers, out_buf *col, int64_t *cur)
{
    Py_ssize_t pos = 0;
    scan_error err;
    for (int64_t i = 0; i < count; i++) {
        int64_t length, ts_delta, offset_delta, key_len, value_len, header_count;
        Py_ssize_t key_at, value_at;
        if ((err = read_varint(data, &pos, end, &length)))
            return err;
        if (length <= 0 || length > end - pos)
            return ERR_LENGTH;
        Py_ssize_t record_end = pos + (Py_ssize_t)length;
        pos++; /* the attributes byte, unused in v2 */
        if ((err = read_varint(data, &pos, record_end, &ts_delta)) ||
            (err = read_varint(data, &pos, record_end, &offset_delta)) ||
            (err = read_bytes(data, &pos, record_end, &key_at, &key_len)) ||
            (err = read_bytes(data, &pos, record_end, &value_at, &value_len)) ||
            (err = read_varint(data, &pos, record_end, &header_count)))
            return err;
        if (header_count < 0)
            return ERR_HEADER_COUNT;
        int64_t offset = base_offset + offset_delta;
        if (offset >= last)
            return OK; /* offsets only grow: nothing further is wanted */
        if (offset < first) {
            pos = record_end;
            continue;
        }
        int64_t row = cur[CUR_ROW];
        if ((row + 1) * 8 > col[COL_OFFSET].len || (row + 1) * 8 > col[COL_TIMESTAMP].len ||
            (row + 1) * 4 > col[COL_TIMESTAMP_TYPE].len)
            return ERR_ROOM;
        ((int64_t *)col[COL_OFFSET].p)[row] = offset;
        ((int64_t *)col[COL_TIMESTAMP].p)[row] =
            (log_append_time ? append_time : base_timestamp + ts_delta) * 1000;
        ((int32_t *)col[COL_TIMESTAMP_TYPE].p)[row] = log_append_time;
        if ((err = append_value(&col[COL_KEY_VALIDITY], &col[COL_KEY_OFFSETS],
                                &col[COL_KEY_DATA], row, &cur[CUR_KEY_POS],
                                &cur[CUR_KEY_NULLS], data + key_at, key_len)) ||
            (err = append_value(&col[COL_VALUE_VALIDITY], &col[COL_VALUE_OFFSETS],
                                &col[COL_VALUE_DATA], row, &cur[CUR_VALUE_POS],
                                &cur[CUR_VALUE_NULLS], data + value_at, value_len)))
            return err;
        if (headers) {
            out_buf *hv = &col[COL_HEADERS_VALIDITY], *ho = &col[COL_HEADERS_OFFSETS];
            if ((row >> 3) >= hv->len || (row + 2) * 4 > ho->len)
                return ERR_ROOM;
            /* A record without headers has a null list, as in Spark's Kafka source. */
            set_bit(hv->p, row, header_count > 0);
            if (header_count == 0)
                cur[CUR_HEADERS_NULLS]++;
            for (int64_t h = 0; h < header_count; h++) {
                int64_t hkey_len, hvalue_len;
                Py_ssize_t hkey_at, hvalue_at;
                if ((err = read_bytes(data, &pos, record_end, &hkey_at, &hkey_len)) ||
                    (err = read_bytes(data, &pos, record_end, &hvalue_at, &hvalue_len)))
                    return err;
                if (hkey_len < 0)
                    return ERR_FIELD;
                int64_t hrow = cur[CUR_HEADER_ROW];
                out_buf *ko = &col[COL_HKEY_OFFSETS], *kd = &col[COL_HKEY_DATA];
                if ((hrow + 2) * 4 > ko->len || cur[CUR_HKEY_POS] + hkey_len > kd->len)
                    return ERR_ROOM;
                memcpy(kd->p + cur[CUR_HKEY_POS], data + hkey_at, (size_t)hkey_len);
                cur[CUR_HKEY_POS] += hkey_len;
                if (cur[CUR_HKEY_POS] > INT32_MAX)
                    return ERR_INT32;
                ((int32_t *)ko->p)[hrow + 1] = (int32_t)cur[CUR_HKEY_POS];
                if ((err = append_value(&col[COL_HVALUE_VALIDITY], &col[COL_HVALUE_OFFSETS],
                                        &col[COL_HVALUE_DATA], hrow, &cur[CUR_HVALUE_POS],
                                        &cur[CUR_HVALUE_NULLS], data + hvalue_at, hvalue_len)))
                    return err;
                cur[CUR_HEADER_ROW] = hrow + 1;
            }
            if (cur[CUR_HEADER_ROW] > INT32_MAX)
                return ERR_INT32;
            ((int32_t *)ho->p)[row + 1] = (int32_t)cur[CUR_HEADER_ROW];
            if (pos != record_end)
                return ERR_MISMATCH;
        }
        pos = record_end;
        cur[CUR_ROW] = row + 1;
    }
    return pos == end ? OK : ERR_TRAILING;
}

static int header_int(PyObject *header, const char *name, int64_t *out)
{
    PyObject *value = PyObject_GetAttrString(header, name);
    if (value == NULL)
        return -1;
    *out = PyLong_AsLongLong(value);
    Py_DECREF(value);
    return (*out == -1 && PyErr_Occurred()) ? -1 : 0;
}

static PyObject *scan_records(PyObject *self, PyObject *args)
{
    Py_buffer records;
    PyObject *header, *columns, *cursor;
    long long first, last;
    if (!PyArg_ParseTuple(args, "y*OLLO!O!:scan_records", &records, &header, &first, &last,
                          &PyTuple_Type, &columns, &PyTuple_Type, &cursor))
        return NULL;
    Py_buffer views[N_COLUMNS];
    out_buf col[N_COLUMNS];
    int held = 0, headers = 0;
    int64_t cur[N_CURSOR];
    int64_t count, base_offset, base_timestamp, max_timestamp, attributes;
    PyObject *result = NULL;

    if (PyTuple_GET_SIZE(columns) != N_COLUMNS || PyTuple_GET_SIZE(cursor) != N_CURSOR) {
        PyErr_SetString(PyExc_ValueError, "wrong number of columns or cursor fields");
        goto done;
    }
    if (header_int(header, "records_count", &count) ||
        header_int(header, "base_offset", &base_offset) ||
        header_int(header, "base_timestamp", &base_timestamp) ||
        header_int(header, "max_timestamp", &max_timestamp) ||
        header_int(header, "attributes", &attributes))
        goto done;
    for (int i = 0; i < N_CURSOR; i++) {
        cur[i] = PyLong_AsLongLong(PyTuple_GET_ITEM(cursor, i));
        if (cur[i] == -1 && PyErr_Occurred())
            goto done;
    }
    headers = PyTuple_GET_ITEM(columns, FIRST_HEADER_COLUMN) != Py_None;
    for (held = 0; held < N_COLUMNS; held++) {
        PyObject *item = PyTuple_GET_ITEM(columns, held);
        if (held >= FIRST_HEADER_COLUMN && !headers) {
            col[held].p = NULL;
            col[held].len = 0;
            continue;
        }
        if (PyObject_GetBuffer(item, &views[held], PyBUF_WRITABLE) < 0)
            goto done;
        col[held].p = views[held].buf;
        col[held].len = views[held].len;
    }
    scan_error err;
    Py_BEGIN_ALLOW_THREADS
    err = scan(records.buf, records.len, count, base_offset, base_timestamp, max_timestamp,
               (attributes & TIMESTAMP_TYPE_MASK) != 0, first, last, headers, col, cur);
    Py_END_ALLOW_THREADS
    if (err) {
        PyErr_SetString(PyExc_ValueError, messages[err]);
        goto done;
    }
    result = PyTuple_New(N_CURSOR);
    for (int i = 0; result != NULL && i < N_CURSOR; i++) {
        PyObject *value = PyLong_FromLongLong(cur[i]);
        if (value == NULL) {
            Py_CLEAR(result);
            break;
        }
        PyTuple_SET_ITEM(result, i, value);
    }
done:
    for (int i = 0; i < held; i++)
        if (i < FIRST_HEADER_COLUMN || headers)
            PyBuffer_Release(&views[i]);
    PyBuffer_Release(&records);
    return result;
}

static PyMethodDef methods[] = {
    {"scan_records", scan_records, METH_VARARGS,
     "scan_records(records, header, first, last, columns, cursor) -> cursor"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "gregor.spark._record_scan", NULL, -1, methods,
};

PyMODINIT_FUNC PyInit__record_scan(void)
{
    return PyModule_Create(&module);
}
