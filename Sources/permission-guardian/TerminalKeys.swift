// What a read from a raw terminal holds: keys typed fast, or an arrow key held down,
// arrive together in one read, and each must count; a sequence may also be cut in two by
// the end of a read, and its second part must not count as keys of their own (`1`, `5`
// would pick choices).

/// Splits the bytes of a read from a raw terminal into keys: an escape sequence (`ESC [
/// … final` or `ESC O x`, as arrow keys send, or `ESC x`, as Alt+x does) is one key, any
/// other byte is one. `rest` is an escape sequence cut off by the end of the bytes (a lone
/// `ESC` included), to be given back as `carried` with the next read's bytes: when those
/// do not go on with the sequence, the `ESC` was the Escape key alone.
func terminalKeys(_ read: some Collection<UInt8>, carried: [UInt8] = []) -> (keys: [[UInt8]], rest: [UInt8]) {
    var keys: [[UInt8]] = []
    var bytes = carried + read
    if carried == [27], let next = read.first, next != UInt8(ascii: "["), next != UInt8(ascii: "O") {
        keys.append([27])
        bytes.removeFirst()
    }
    var i = 0
    while i < bytes.count {
        var end = i + 1
        if bytes[i] == 27 {
            guard end < bytes.count else { return (keys, [27]) }
            if bytes[end] == UInt8(ascii: "[") {
                // Parameters and intermediates, then one final byte in 0x40...0x7E.
                end += 1
                while end < bytes.count, !(0x40...0x7E).contains(bytes[end]) { end += 1 }
                guard end < bytes.count else { return (keys, Array(bytes[i...])) }
            } else if bytes[end] == UInt8(ascii: "O") {
                end += 1
                guard end < bytes.count else { return (keys, Array(bytes[i...])) }
            }
            end += 1
        }
        keys.append(Array(bytes[i..<end]))
        i = end
    }
    return (keys, [])
}
