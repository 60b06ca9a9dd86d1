//! Value parsers the subcommands' options share (clap `value_parser`s): numbers in C's
//! `strtol(s, NULL, 0)` syntax, as rdma-core's and perftest's getopt loops read them.

/// A number in C's `strtol(s, NULL, 0)` syntax (decimal, `0x` hexadecimal, `0` octal), strictly:
/// trailing garbage is an error, not a 0.
pub fn parse_c_number(s: &str) -> Result<i64, String> {
    let t = s.trim();
    let (neg, t) = match t.strip_prefix('-') {
        Some(r) => (true, r),
        None => (false, t.strip_prefix('+').unwrap_or(t)),
    };
    let v = if let Some(h) = t.strip_prefix("0x").or_else(|| t.strip_prefix("0X")) {
        i64::from_str_radix(h, 16)
    } else if t.len() > 1 && t.starts_with('0') {
        i64::from_str_radix(&t[1..], 8)
    } else {
        t.parse::<i64>()
    };
    let v = v.map_err(|_| format!("`{s}` is not a number"))?;
    Ok(if neg { -v } else { v })
}

/// [`parse_c_number`] limited to `LO..=HI` and converted to `T` (a clap value parser:
/// `value_parser = c_number::<u16, 1, 65535>`).
pub fn c_number<T: TryFrom<i64>, const LO: i64, const HI: i64>(s: &str) -> Result<T, String> {
    let v = parse_c_number(s)?;
    if v < LO || v > HI {
        return Err(format!("{v} must be between {LO} and {HI}"));
    }
    T::try_from(v).map_err(|_| format!("{v} must be between {LO} and {HI}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c_numbers() {
        assert_eq!(parse_c_number("010").unwrap(), 8);
        assert_eq!(parse_c_number("0x4000").unwrap(), 0x4000);
        assert_eq!(parse_c_number("-12").unwrap(), -12);
        assert_eq!(parse_c_number("0").unwrap(), 0);
        assert!(parse_c_number("12abc").unwrap_err().contains("not a number"));
        assert!(parse_c_number("").is_err());
        assert_eq!(c_number::<u16, 1, 65535>("0xffff").unwrap(), 65535);
        assert!(c_number::<u16, 1, 65535>("0").unwrap_err().contains("between 1 and 65535"));
        assert!(c_number::<u8, 0, 15>("16").is_err());
    }
}
