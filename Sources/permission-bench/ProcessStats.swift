// What a server process costs: its CPU time and memory, read from /proc.

import Foundation

/// The fields of /proc/PID/stat after the command's name (which may hold spaces), from its
/// state on; nil when the process is gone.
func procStat(_ pid: Int32) -> [Substring]? {
    guard let stat = try? String(contentsOfFile: "/proc/\(pid)/stat", encoding: .utf8),
        let close = stat.lastIndex(of: ")")
    else { return nil }
    return stat[stat.index(after: close)...].split(separator: " ")
}

/// A process's CPU time in seconds, in user space and in the kernel.
struct ProcessCPU {
    var user = 0.0
    var system = 0.0
    var total: Double { user + system }

    /// Its utime and stime, all threads (from /proc); zero if it cannot be read.
    init(pid: Int32) {
        guard let fields = procStat(pid), fields.count > 12 else { return }
        let ticks = Double(sysconf(Int32(_SC_CLK_TCK)))
        user = (Double(fields[11]) ?? 0) / ticks
        system = (Double(fields[12]) ?? 0) / ticks
    }

    init(user: Double, system: Double) {
        self.user = user
        self.system = system
    }

    /// The sum over `pids`.
    init(pids: [Int32]) {
        for pid in pids {
            let one = ProcessCPU(pid: pid)
            user += one.user
            system += one.system
        }
    }

    static func - (a: ProcessCPU, b: ProcessCPU) -> ProcessCPU { ProcessCPU(user: a.user - b.user, system: a.system - b.system) }
}

func rssBytes(pid: Int32) -> Int {
    guard let status = try? String(contentsOfFile: "/proc/\(pid)/status", encoding: .utf8),
        let line = status.split(separator: "\n").first(where: { $0.hasPrefix("VmRSS:") })
    else { return 0 }
    return (Int(line.split(separator: " ").dropFirst().first ?? "") ?? 0) * 1024
}
