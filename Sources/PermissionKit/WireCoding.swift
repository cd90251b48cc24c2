// Conversion between the API types and the relay's JSON (protocol.md, "Data model").

import Foundation
import RelayProtocol

/// A topic the relay understands.
protocol WireTopic {
    var wire: JSON { get }
    init?(wire: JSON)
}

extension CommunicationHandle {
    var wire: JSON { .object(["value": .string(value), "kind": .string(kind.rawValue)]) }

    init?(wire: JSON) {
        guard let v = wire["value"]?.string, let k = wire["kind"]?.string.flatMap(Kind.init(rawValue:)) else { return nil }
        self.init(value: v, kind: k)
    }
}

/// The name parts carried on the wire, by their wire names.
private var nameFields: [(String, WritableKeyPath<PersonNameComponents, String?>)] {
    [
        ("givenName", \.givenName), ("familyName", \.familyName), ("middleName", \.middleName),
        ("namePrefix", \.namePrefix), ("nameSuffix", \.nameSuffix), ("nickname", \.nickname),
    ]
}

extension CommunicationTopic: WireTopic {
    var wire: JSON {
        let people: [JSON] = personInformation.map { p in
            var o: JSONObject = ["handle": p.handle.wire]
            if let n = p.nameComponents {
                var names = JSONObject()
                for (key, path) in nameFields { if let v = n[keyPath: path] { names[key] = .string(v) } }
                o["nameComponents"] = .object(names)
            }
            o["avatarImage"] = p.avatarImage.map { .string($0.base64EncodedString()) } ?? .null
            return .object(o)
        }
        return .object([
            "kind": "communication", "personInformation": .array(people),
            "actions": .array(actions.map(\.rawValue).sorted().map(JSON.string)),
        ])
    }

    init?(wire: JSON) {
        guard wire["kind"]?.string == "communication", let people = wire["personInformation"]?.array else { return nil }
        var out: [PersonInformation] = []
        for p in people {
            guard let h = p["handle"].flatMap(CommunicationHandle.init(wire:)) else { return nil }
            var names: PersonNameComponents?
            if let o = p["nameComponents"]?.object {
                var n = PersonNameComponents()
                for (key, path) in nameFields { n[keyPath: path] = o[key]?.string }
                names = n
            }
            out.append(
                PersonInformation(
                    handle: h, nameComponents: names, avatarImage: p["avatarImage"]?.string.flatMap { Data(base64Encoded: $0) }))
        }
        let actions = Set((wire["actions"]?.array ?? []).compactMap { $0.string.flatMap(Action.init(rawValue:)) })
        self.init(personInformation: out, actions: actions)
    }
}

extension SignificantAppUpdateTopic: WireTopic {
    var wire: JSON { .object(["kind": "significantAppUpdate", "description": .string(description)]) }

    init?(wire: JSON) {
        guard wire["kind"]?.string == "significantAppUpdate", let d = wire["description"]?.string else { return nil }
        self.init(description: d)
    }
}

extension PermissionChoice {
    var wire: JSON {
        var o: JSONObject = ["id": .string(id), "title": .string(title), "answer": .string(answer.rawValue)]
        if let durationSeconds { o["durationSeconds"] = .int(Int64(durationSeconds)) }
        return .object(o)
    }

    init?(wire: JSON) {
        guard let id = wire["id"]?.string, let title = wire["title"]?.string,
            let answer = wire["answer"]?.string.flatMap(Answer.init(rawValue:))
        else { return nil }
        self.init(id: id, title: title, answer: answer, durationSeconds: wire["durationSeconds"]?.int.map(Int.init))
    }
}

extension Date {
    /// Dates beyond what milliseconds in an Int64 can hold are held at its ends (NaN reads
    /// as the epoch): the relay refuses them as timestamps rather than the app trapping here.
    var rfc3339: String {
        let ms = (timeIntervalSince1970 * 1000).rounded()
        let clamped = ms.isNaN ? 0 : ms >= 0x1p63 ? Int64.max : ms <= -0x1p63 ? Int64.min : Int64(ms)
        return Timestamp(milliseconds: clamped).rfc3339
    }

    init?(rfc3339: String) {
        guard let t = Timestamp(rfc3339: rfc3339) else { return nil }
        self.init(timeIntervalSince1970: Double(t.milliseconds) / 1000)
    }
}

extension PermissionQuestion {
    /// The question as `ask` sends it; nil for a topic the relay does not know.
    var wire: JSON? {
        guard let topic = topic as? WireTopic else { return nil }
        var o: JSONObject = [
            "id": .string(id.uuidString), "topic": topic.wire, "choices": .array(choices.map(\.wire)),
            "defaultChoice": .string(defaultChoice.id),
        ]
        if let expirationDate { o["expirationDate"] = .string(expirationDate.rfc3339) }
        return .object(o)
    }

    /// A question as the relay sends it on; nil when it is not of this topic type.
    init?(wire: JSON) {
        guard let id = wire["id"]?.string.flatMap(UUID.init(uuidString:)), let topicJSON = wire["topic"],
            let topicType = Topic.self as? WireTopic.Type, let topic = topicType.init(wire: topicJSON) as? Topic
        else { return nil }
        let choices = (wire["choices"]?.array ?? []).compactMap(PermissionChoice.init(wire:))
        let def = choices.first { $0.id == wire["defaultChoice"]?.string }
        self.init(
            id: id, topic: topic, choices: choices.isEmpty ? [.approve, .decline] : choices, defaultChoice: def,
            expirationDate: wire["expirationDate"]?.string.flatMap(Date.init(rfc3339:)))
    }
}
