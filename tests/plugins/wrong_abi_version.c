/* A plugin built against a future ABI: it describes itself as version 99 whatever it is asked.
 * `attnbench validate` must exit 2 naming both versions. */
#include <stddef.h>

#include "attnbench_plugin.h"

static const attnbench_plugin_v1 future_plugin = {
    .abi_version = 99u, .name = "from_the_future", .version = "99.0", .description = "speaks ABI version 99"};

ATTNBENCH_PLUGIN_EXPORT const attnbench_plugin_v1* attnbench_plugin_get(uint32_t abi_version) {
  (void)abi_version;
  return &future_plugin;
}
