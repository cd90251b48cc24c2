/// The role a session acts in (welcome's `role`).
public enum Role: String, Sendable, Hashable {
    case child, guardian, admin
}
