/* Stand-in for the SDK's assert.h (macOS check build only; see TargetConditionals.h). */
#define assert(x) ((void)0)
