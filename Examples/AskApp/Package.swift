// swift-tools-version:6.0
import PackageDescription

let package = Package(
    name: "AskApp",
    dependencies: [
        // This clone of PermissionRelay (yours: where you cloned it). SwiftPM names a path
        // dependency after its folder; `name:` makes it "PermissionRelay" whatever that is.
        .package(name: "PermissionRelay", path: "../..")
    ],
    targets: [
        .executableTarget(
            name: "AskApp",
            dependencies: [.product(name: "PermissionKit", package: "PermissionRelay")])
    ]
)
