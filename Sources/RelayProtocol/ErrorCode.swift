// The one catalogue of the wire contract's error codes (§10).

/// Every error code the relay sends in an `error` frame.
public enum ErrorCode: String, CaseIterable, Sendable {
    case badFrame, frameTooLarge, unknownType, badRequest, unsupportedProtocol
    case unauthorized, forbidden, notFound, conflict, invalidQuestion
    case communicationLimitsNotEnabled, contactSyncNotSetup, alreadyAnswered
    case expired, cancelled, invalidChoice, tooManyPending, rateLimited
    case busy, `internal`
}

/// A request that cannot be served: its code and a message saying what was wrong.
public struct RequestError: Error, Sendable, Equatable {
    public var code: ErrorCode
    public var message: String
    /// Extra fields for the error frame (e.g. `answeredBy` with `alreadyAnswered`).
    public var extra: JSONObject

    public init(_ code: ErrorCode, _ message: String, extra: JSONObject = [:]) {
        self.code = code
        self.message = message
        self.extra = extra
    }
}

extension RequestError {
    /// The `error` frame for this error, replying to `re` when it is known.
    public func frame(re: String?) -> JSONObject {
        var o: JSONObject = ["type": "error"]
        if let re { o["re"] = .string(re) }
        o["code"] = .string(code.rawValue)
        o["message"] = .string(message)
        for f in extra.fields { o[f.key] = f.value }
        return o
    }
}
