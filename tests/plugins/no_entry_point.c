/* A shared library that is not an attnbench plugin: it exports no attnbench_plugin_get.
 * `attnbench validate` must exit 2 naming the missing entry point. */
int not_an_attnbench_plugin(void) { return 42; }
