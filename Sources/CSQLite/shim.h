#include <sqlite3.h>

/* sqlite3_config is variadic, which Swift cannot call. Turns off SQLite's memory
   statistics, which take a process-wide mutex at every allocation and free; nothing
   here reads them. Has effect only before SQLite is first initialized (the first open). */
static inline int permission_sqlite_memstatus_off(void) {
    return sqlite3_config(SQLITE_CONFIG_MEMSTATUS, 0);
}
