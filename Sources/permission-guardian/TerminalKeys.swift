// What a read from a raw terminal holds: keys typed fast, or an arrow key held down,
// arrive together in one read, and each must count.

/// Splits the bytes of one read from a raw terminal into keys: an escape sequence
/// (`ESC [ … final` or `ESC O x`, as arrow keys send, or `ESC x`, as Alt+x does) is one
/// key, any other byte is one. A sequence cut off by the end of the read is kept whole as
/// what there is of it.
func terminalKeys(_ bytes: [UInt8]) -> [[UInt8]] {
    var keys: [[UInt8]] = []
    var i = 0
    while i < bytes.count {
        var end = i + 1
        if bytes[i] == 27, end < bytes.count {
            if bytes[end] == UInt8(ascii: "[") {
                // Parameters and intermediates, then one final byte in 0x40...0x7E.
                end += 1
                while end < bytes.count, !(0x40...0x7E).contains(bytes[end]) { end += 1 }
                end = min(end + 1, bytes.count)
            } else if bytes[end] == UInt8(ascii: "O") {
                end = min(end + 2, bytes.count)
            } else {
                end += 1
            }
        }
        keys.append(Array(bytes[i..<end]))
        i = end
    }
    return keys
}
