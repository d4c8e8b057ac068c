/*
 * Shifts a process's wall clock by the number of milliseconds written in the
 * file named by CLOCK_SHIFT_FILE, re-read at most once per millisecond, so
 * the clock of a running redis-server can be jumped. LD_PRELOAD it.
 *
 * Why not libfaketime: Debian's redis-server links libjemalloc, and
 * libfaketime 0.9.10 deadlocks in it at start-up (its initialisation calls
 * dlsym, whose error path allocates; jemalloc's first allocation reads the
 * clock, which re-enters libfaketime: upstream libfaketime issues 130 and
 * 478, unfixed). This shim makes no allocation and calls the kernel
 * directly, so it cannot re-enter itself.
 *
 * Only the wall clock moves (CLOCK_REALTIME, gettimeofday, time): key
 * expiry in Redis follows it; the monotonic clock that drives its timers
 * does not jump.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static long long shift_ns;
static long long checked_at = -1;

static long long monotonic_ns(void) {
  struct timespec ts;
  syscall(SYS_clock_gettime, CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static long long shift(void) {
  long long now = monotonic_ns();
  if (checked_at >= 0 && now - checked_at < 1000000LL) return shift_ns;
  checked_at = now;
  const char *path = getenv("CLOCK_SHIFT_FILE");
  if (!path) return shift_ns;
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return shift_ns;
  char text[32];
  ssize_t n = read(fd, text, sizeof text - 1);
  close(fd);
  if (n > 0) {
    text[n] = 0;
    shift_ns = strtoll(text, NULL, 10) * 1000000LL;
  }
  return shift_ns;
}

int clock_gettime(clockid_t id, struct timespec *ts) {
  int rc = (int)syscall(SYS_clock_gettime, id, ts);
  if (rc == 0 && (id == CLOCK_REALTIME || id == CLOCK_REALTIME_COARSE)) {
    long long ns = ts->tv_sec * 1000000000LL + ts->tv_nsec + shift();
    ts->tv_sec = ns / 1000000000LL;
    ts->tv_nsec = ns % 1000000000LL;
  }
  return rc;
}

int gettimeofday(struct timeval *restrict tv, void *restrict tz) {
  (void)tz;
  struct timespec ts;
  int rc = clock_gettime(CLOCK_REALTIME, &ts);
  if (rc == 0) {
    tv->tv_sec = ts.tv_sec;
    tv->tv_usec = ts.tv_nsec / 1000;
  }
  return rc;
}

time_t time(time_t *out) {
  struct timespec ts;
  clock_gettime(CLOCK_REALTIME, &ts);
  if (out) *out = ts.tv_sec;
  return ts.tv_sec;
}
