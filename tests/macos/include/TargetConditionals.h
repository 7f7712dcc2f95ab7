/*
 * A stand-in for the Apple SDK's TargetConditionals.h, so that the C parts of
 * ring's build compile for the macOS check build on a Linux machine without the
 * SDK (.ci/run: `cargo check` and `cargo clippy` for x86_64-apple-darwin). That
 * build never links; these objects are never run. Says: macOS, not iOS.
 */
#ifndef TETHER_TARGET_CONDITIONALS_STANDIN
#define TETHER_TARGET_CONDITIONALS_STANDIN
#define TARGET_OS_MAC 1
#define TARGET_OS_OSX 1
#define TARGET_OS_IPHONE 0
#define TARGET_OS_IOS 0
#define TARGET_OS_TV 0
#define TARGET_OS_WATCH 0
#define TARGET_OS_VISION 0
#define TARGET_OS_SIMULATOR 0
#define TARGET_OS_EMBEDDED 0
#endif
