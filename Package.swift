// swift-tools-version:6.0
import PackageDescription

/// The relay's loop, core and store are owned by one thread each and tested in debug builds,
/// which keep Swift's run-time exclusivity checks; release builds leave them out of this hot
/// path (they cost about 4% of the relay's instructions per cycle), and out of the
/// benchmark's single-threaded load generator and forwarder, which share the machine with it.
let relayLoop: [SwiftSetting] = [.unsafeFlags(["-enforce-exclusivity=unchecked"], .when(configuration: .release))]

let package = Package(
    name: "PermissionRelay",
    products: [
        .executable(name: "permission-relay", targets: ["permission-relay"]),
        .executable(name: "permission-child", targets: ["permission-child"]),
        .executable(name: "permission-guardian", targets: ["permission-guardian"]),
        .executable(name: "permission-bench", targets: ["permission-bench"]),
        .executable(name: "permission-harness", targets: ["permission-harness"]),
        .library(name: "PermissionKit", targets: ["PermissionKit"]),
        .library(name: "RelayProtocol", targets: ["RelayProtocol"]),
    ],
    targets: [
        // System C libraries and the few Linux calls Glibc does not expose.
        .target(name: "CSystem"),
        .systemLibrary(name: "CSQLite", providers: [.apt(["libsqlite3-dev"])]),
        .systemLibrary(name: "CCrypto", providers: [.apt(["libssl-dev"])]),
        .systemLibrary(name: "CNATS", pkgConfig: "libnats", providers: [.apt(["libnats-dev"])]),

        // bytes <-> messages; no I/O.
        .target(name: "RelayProtocol"),
        // what the relay remembers, as values: records, the changes to them, a snapshot.
        .target(name: "RelayModel", dependencies: ["RelayProtocol"], swiftSettings: relayLoop),
        // the relay's rules as a deterministic state machine; it emits changes, never stores them.
        .target(name: "RelayCore", dependencies: ["RelayProtocol", "RelayModel", "CCrypto"], swiftSettings: relayLoop),
        // persistence: the store protocol, the SQLite store (the only durable state) and a memory one.
        .target(name: "RelayStore", dependencies: ["RelayProtocol", "RelayModel", "CSQLite", "CSystem"], swiftSettings: relayLoop),
        // the epoll reactor that moves bytes between sockets and the core.
        .target(
            name: "RelayServer", dependencies: ["RelayProtocol", "RelayModel", "RelayStore", "RelayCore", "RelayHub", "CSystem"],
            swiftSettings: relayLoop),
        // the link to a family hub: NATS JetStream through libnats.
        .target(name: "RelayHub", dependencies: ["CNATS", "CCrypto"]),
        // the client library with Apple's PermissionKit names.
        .target(name: "PermissionKit", dependencies: ["RelayProtocol", "CSystem"]),
        // argument parsing and exit codes shared by the programs.
        .target(name: "CLISupport"),
        .executableTarget(
            name: "permission-relay",
            dependencies: ["RelayServer", "RelayCore", "RelayModel", "RelayStore", "RelayProtocol", "RelayHub", "CSystem", "CLISupport"]),
        .target(name: "ClientCommands", dependencies: ["PermissionKit", "CLISupport", "RelayProtocol", "CSystem"]),
        .executableTarget(name: "permission-child", dependencies: ["PermissionKit", "CLISupport", "ClientCommands", "RelayProtocol"]),
        .executableTarget(
            name: "permission-harness", dependencies: ["PermissionKit", "CLISupport", "ClientCommands", "RelayProtocol", "RelayServer"]),
        .executableTarget(
            name: "permission-bench",
            dependencies: ["RelayProtocol", "RelayServer", "RelayModel", "RelayStore", "RelayCore", "CSystem", "CLISupport"],
            swiftSettings: relayLoop),
        .executableTarget(
            name: "permission-guardian", dependencies: ["PermissionKit", "CLISupport", "ClientCommands", "RelayProtocol", "CSystem"]),

        .testTarget(name: "RelayProtocolTests", dependencies: ["RelayProtocol"]),
        .testTarget(
            name: "RelayStoreTests", dependencies: ["RelayStore", "RelayModel", "RelayProtocol", "CSQLite"],
            resources: [.copy("Fixtures")]),
        .testTarget(name: "RelayCoreTests", dependencies: ["RelayCore", "RelayModel", "RelayStore", "RelayProtocol"]),
        .testTarget(
            name: "RelayServerTests", dependencies: ["RelayServer", "RelayCore", "RelayModel", "RelayStore", "RelayProtocol", "CSystem"]),
        .testTarget(
            name: "EndToEndTests",
            dependencies: ["RelayProtocol", "RelayModel", "RelayServer", "RelayStore", "RelayHub", "CSystem", "CSQLite", "PermissionKit"]),
        .testTarget(name: "RelayHubTests", dependencies: ["RelayHub"]),
        .testTarget(name: "PermissionKitTests", dependencies: ["PermissionKit", "RelayProtocol", "CSystem"]),
        .testTarget(name: "permission-benchTests", dependencies: ["permission-bench", "RelayProtocol"]),
        .testTarget(name: "permission-harnessTests", dependencies: ["permission-harness"]),
        .testTarget(name: "permission-guardianTests", dependencies: ["permission-guardian"]),
        .testTarget(name: "ClientCommandsTests", dependencies: ["ClientCommands"]),
        .testTarget(name: "CLISupportTests", dependencies: ["CLISupport"]),
    ],
    swiftLanguageModes: [.v6]
)
