// What a scenario may say. Every key of the scenario, its families, its steps and their
// questions is one the harness reads: a mistyped key fails the scenario before anything
// runs, rather than being ignored (a check mistyped would otherwise pass unseen).

import CLISupport
import RelayProtocol

enum ScenarioShape {
    private static let scenarioKeys = ["name", "relayFlags", "families", "devices", "steps"]
    private static let familyKeys = ["children", "guardians"]
    private static let questionKeys = ["id", "handles", "actions", "choices", "defaultChoice", "expiresIn", "update"]
    private static let choiceKeys = ["id", "title", "answer", "durationSeconds"]
    /// Taken by every step.
    private static let stepKeys = ["do", "actor", "timeout"]
    private static let request = ["expect", "reply"]
    /// What each step takes besides `stepKeys`.
    private static let steps: [String: [String]] = [
        "ask": ["question"] + request, "cancel": ["id"] + request, "answer": ["id", "choice"] + request,
        "known": ["handles"] + request, "limits": request, "set-limits": ["child", "enabled"] + request,
        "add-known": ["child", "handles"] + request, "remove-known": ["child", "handles"] + request,
        "history": request, "pending": request, "questions": request, "await-reply": ["expect"],
        "await": ["event", "id", "fields"], "no-event": ["event", "id", "within"],
        "kill-relay": ["device"], "start-relay": ["device"], "kill-hub": [], "start-hub": [], "cut-link": ["device"],
        "restore-link": ["device"], "stop-actor": [], "kill-actor": [], "start-actor": [], "sleep": ["seconds"],
    ]

    /// Throws what is wrong with the scenario `s`'s shape, if anything: a key it does not
    /// take, a part that is not an object, or no steps.
    static func check(_ s: JSONObject) throws(ScenarioFailure) {
        try keys(of: s, allowed: scenarioKeys, in: "the scenario")
        for f in s["families"]?.object?.fields ?? [] {
            guard let family = f.value.object else { throw ScenarioFailure(description: "family \(f.key) must be an object") }
            try keys(of: family, allowed: familyKeys, in: "family \(f.key)")
        }
        guard let list = s["steps"]?.array, !list.isEmpty else {
            throw ScenarioFailure(description: "the scenario has no \"steps\": a list of steps, each with a \"do\"")
        }
        for (i, value) in list.enumerated() {
            guard let step = value.object, let what = step["do"]?.string else {
                throw ScenarioFailure(description: "step \(i + 1) has no \"do\"")
            }
            guard let takes = steps[what] else {
                throw ScenarioFailure(
                    description: "step \(i + 1): unknown step \"\(what)\"\(didYouMean(what, among: steps.keys.sorted()))")
            }
            let place = "step \(i + 1) (\(what))"
            try keys(of: step, allowed: stepKeys + takes, in: place)
            guard what == "ask", let question = step["question"] else { continue }
            guard let q = question.object else { throw ScenarioFailure(description: "\(place): \"question\" must be an object") }
            try keys(of: q, allowed: questionKeys, in: "\(place)'s question")
            for (k, choice) in (q["choices"]?.array ?? []).enumerated() {
                guard let c = choice.object else { throw ScenarioFailure(description: "\(place): choice \(k + 1) must be an object") }
                try keys(of: c, allowed: choiceKeys, in: "\(place)'s choice \(k + 1)")
            }
        }
    }

    private static func keys(of o: JSONObject, allowed: [String], in place: String) throws(ScenarioFailure) {
        for f in o.fields where !allowed.contains(f.key) {
            throw ScenarioFailure(
                description: "\(place): unknown key \"\(f.key)\"\(didYouMean(f.key, among: allowed)); it takes "
                    + allowed.map { "\"\($0)\"" }.joined(separator: ", "))
        }
    }
}
