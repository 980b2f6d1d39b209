/*
 * src/core/tfrecord.h — TFRecord framing, CRC-32C and the TensorBoard Event
 * messages dpt writes (internal).
 *
 * A TFRecord file is a sequence of records, each
 *
 *     uint64  length                      little-endian
 *     uint32  masked CRC-32C of the 8 length bytes
 *     byte    data[length]
 *     uint32  masked CRC-32C of data
 *
 * where mask(c) = ((c >> 15) | (c << 17)) + 0xa282ead8 (mod 2^32): a CRC of
 * data that itself holds CRCs stays informative. CRC-32C is the Castagnoli
 * polynomial 0x1EDC6F41 (reflected: 0x82F63B78), initial value and final
 * xor 0xFFFFFFFF; "123456789" gives 0xE3069283.
 *
 * A TensorBoard events file (events.out.tfevents.*) holds one Event message
 * (protocol buffers) per record. dpt writes the fields TensorBoard's scalar
 * dashboard reads:
 *
 *     Event   { double wall_time = 1; int64 step = 2;
 *               string file_version = 3;  (first record: "brain.Event:2")
 *               Summary summary = 5; }
 *     Summary { repeated Value value = 1; }
 *     Value   { string tag = 1; float simple_value = 2; }
 *
 * Encoding is by hand: a field is a key varint (number << 3 | wire type:
 * 0 varint, 1 64-bit, 2 length-delimited, 5 32-bit) then its value; numbers
 * are little-endian.
 */
#ifndef DPT_CORE_TFRECORD_H
#define DPT_CORE_TFRECORD_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* CRC-32C of n bytes. crc is the value of the bytes before (0 to start), so
 * crc32c(crc32c(0, a), b) is the CRC of a followed by b. */
uint32_t dpt__crc32c(uint32_t crc, const void *data, size_t n);
/* The TFRecord mask of a CRC, and its inverse. */
uint32_t dpt__crc32c_mask(uint32_t crc);
uint32_t dpt__crc32c_unmask(uint32_t masked);

/* A growing byte buffer (caller's storage, zeroed to start; data owned by
 * the buffer until dpt__tfbuf_free). */
typedef struct dpt__tfbuf {
    unsigned char *data;
    size_t len, cap;
} dpt__tfbuf_t;

void dpt__tfbuf_free(dpt__tfbuf_t *b);

/* Appends one framed record holding n bytes of data to out. DPT_ENOMEM. */
int dpt__tfrecord_append(dpt__tfbuf_t *out, const void *data, size_t n);

/* Appends one Summary.Value {tag, simple_value} to `summary` (the body of a
 * Summary being built). DPT_ENOMEM. */
int dpt__tfevent_add_scalar(dpt__tfbuf_t *summary, const char *tag, float value);

/* Appends to `out` one framed record holding an Event with wall_time (Unix
 * seconds), step, file_version (NULL: none) and the Summary whose body is
 * `summary` (NULL or empty: none). DPT_ENOMEM. */
int dpt__tfevent_append(dpt__tfbuf_t *out, double wall_time, int64_t step, const char *file_version,
                        const dpt__tfbuf_t *summary);

/* Reads the next record of f into rec (rec->len = its data length).
 * Returns 1 for a record, 0 at the end of the file, or DPT_EFORMAT (a
 * record cut short, a length or data CRC that does not match, a length
 * over 1 GiB) with a message naming `name` and the record's offset;
 * DPT_ENOMEM. */
int dpt__tfrecord_read(FILE *f, const char *name, dpt__tfbuf_t *rec);

/* What dpt__tfevent_decode found in an Event (pointers into the record). */
typedef struct dpt__tfevent_info {
    double wall_time;
    int64_t step;
    const unsigned char *file_version; /* NULL when absent */
    size_t file_version_len;
    const unsigned char *summary; /* body of the Summary; NULL when absent */
    size_t summary_len;
} dpt__tfevent_info_t;

/* Decodes the fields above from an Event message (other fields are
 * skipped). DPT_EFORMAT for a message that does not parse. */
int dpt__tfevent_decode(const unsigned char *p, size_t n, dpt__tfevent_info_t *ev);

#endif
