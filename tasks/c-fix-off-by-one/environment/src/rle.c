/* rle: run-length encode or decode the first line of a file.
 *
 *   rle encode FILE    "aaabcc" -> "3a1b2c"
 *   rle decode FILE    "3a1b2c" -> "aaabcc"
 */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Leak checking needs ptrace, which containers usually forbid; memory errors are still caught. */
const char *__asan_default_options(void) { return "detect_leaks=0"; }

static char *read_line(const char *path)
{
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return NULL;
    size_t cap = 64, len = 0;
    char *buf = malloc(cap);
    int c;
    while (buf != NULL && (c = fgetc(f)) != EOF && c != '\n') {
        if (len + 1 >= cap) {
            cap *= 2;
            buf = realloc(buf, cap);
            if (buf == NULL)
                break;
        }
        buf[len++] = (char)c;
    }
    fclose(f);
    if (buf != NULL)
        buf[len] = '\0';
    return buf;
}

static char *encode(const char *s)
{
    size_t len = strlen(s);
    /* A run of length 1 needs 2 output characters, longer runs need fewer per input character. */
    char *out = malloc(2 * len);
    if (out == NULL)
        return NULL;
    size_t pos = 0, run = 1;
    for (size_t i = 1; i < len; i++) {
        if (s[i] == s[i - 1]) {
            run++;
            continue;
        }
        pos += sprintf(out + pos, "%zu%c", run, s[i - 1]);
        run = 1;
    }
    out[pos] = '\0';
    return out;
}

static size_t read_count(const char **p)
{
    size_t n = 0;
    while (isdigit((unsigned char)**p)) {
        n = n * 10 + (size_t)(**p - '0');
        (*p)++;
    }
    return n;
}

static char *decode(const char *s)
{
    size_t total = 0;
    for (const char *p = s; *p != '\0'; p++) {
        total += read_count(&p);
        if (*p == '\0')
            break;
    }
    char *out = malloc(total + 1);
    if (out == NULL)
        return NULL;
    size_t pos = 0;
    for (const char *p = s; *p != '\0'; p++) {
        size_t n = read_count(&p);
        if (*p == '\0')
            break;
        for (size_t k = 0; k <= n; k++)
            out[pos++] = *p;
    }
    out[pos] = '\0';
    return out;
}

int main(int argc, char **argv)
{
    if (argc != 3 || (strcmp(argv[1], "encode") != 0 && strcmp(argv[1], "decode") != 0)) {
        fprintf(stderr, "usage: %s encode|decode FILE\n", argv[0]);
        return 2;
    }
    char *line = read_line(argv[2]);
    if (line == NULL) {
        fprintf(stderr, "rle: cannot read %s\n", argv[2]);
        return 1;
    }
    char *result = strcmp(argv[1], "encode") == 0 ? encode(line) : decode(line);
    if (result == NULL) {
        fprintf(stderr, "rle: out of memory\n");
        free(line);
        return 1;
    }
    printf("%s\n", result);
    free(result);
    free(line);
    return 0;
}
