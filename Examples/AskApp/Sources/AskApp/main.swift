// A child's app asks its guardians whether it may message someone and waits for the
// answer: exit 0 approved, 2 denied, 3 closed unanswered (cancelled or expired), 1 error.
// Who the child is comes from the environment: PERMISSION_MEMBER and PERMISSION_TOKEN
// (or PERMISSION_CREDENTIALS), PERMISSION_RELAY_SOCKET when not the default socket.
//
//     swift run AskApp +15550123

import Foundation
import PermissionKit

/// Writes a line at once, also through a pipe (where `print` holds it until exit):
/// "waiting" is news while the app waits.
func say(_ line: String) {
    FileHandle.standardOutput.write(Data("\(line)\n".utf8))
}

func fail(_ message: String) -> Never {
    FileHandle.standardError.write(Data("AskApp: \(message)\n".utf8))
    exit(1)
}

let center: AskCenter
do {
    center = AskCenter(configuration: try RelayConfiguration.fromEnvironment())
} catch .systemError(let why) {
    fail("\(why)")  // which credentials are missing, and where they are read from
} catch {
    fail(error.localizedDescription)
}

let value = CommandLine.arguments.dropFirst().first ?? "+1 555 0100"
let handle = CommunicationHandle(value: value, kind: value.contains("@") ? .emailAddress : .phoneNumber)
var question = PermissionQuestion(
    communicationTopic: CommunicationTopic(personInformation: [.init(handle: handle)], actions: [.message]))
question.expirationDate = Date().addingTimeInterval(3600)  // unanswered by then: closed as expired

do {
    try await center.ask(question)  // returns once the relay has stored it
} catch AskError.communicationLimitsNotEnabled {
    say("approved: communication limits are off")
    exit(0)
} catch {
    var said = error.localizedDescription
    // The relay's reason, when the error does not say it already.
    if let reason = center.lastError?.description, !reason.isEmpty, !said.contains(reason) { said += " (\(reason))" }
    fail(said)
}
say("asked to message \(value); waiting for a guardian")

/// How the question ended: a guardian's response, or closed without one.
enum Ending: Sendable {
    case response(PermissionResponse<CommunicationTopic>)
    case closed(QuestionOutcome.Reason)
}

// The first of the response and the outcome of this question. The center also hands on
// those of questions asked before (by an earlier run, say, stopped while it waited): each
// is handed once, so the app says it rather than let it go unseen. The streams end, with
// nil, only if the relay refuses the credentials.
let id = question.id
let ending = await withTaskGroup(of: Ending?.self) { group in
    group.addTask {
        for await r in center.responses(for: CommunicationTopic.self) {
            if r.question.id == id { return .response(r) }
            say("an earlier question was answered: \(r.choice.answer == .approval ? "approved" : "denied") by \(r.guardian)")
        }
        return nil
    }
    group.addTask {
        for await o in center.outcomes() {
            if o.questionID == id { return .closed(o.reason) }
            say("an earlier question closed unanswered: \(o.reason.rawValue)")
        }
        return nil
    }
    let first = await group.next() ?? nil
    group.cancelAll()
    return first
}
await center.close()  // records the response as processed: the next run is not shown it again

switch ending {
case .response(let r) where r.choice.answer == .approval:
    say("approved by \(r.guardian): \(r.choice.title)")
    exit(0)
case .response(let r):
    say("denied by \(r.guardian): \(r.choice.title)")
    exit(2)
case .closed(let reason):
    say("closed unanswered: \(reason.rawValue)")
    exit(3)
case nil:
    fail(center.connectionError?.description ?? "the connection to the relay ended")
}
