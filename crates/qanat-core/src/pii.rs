//! Finding personal data in a column: by its values (email addresses, phone numbers,
//! Emirates ID numbers, IBANs, payment card numbers, IP addresses, passport numbers)
//! and by its name (names, dates of birth, passports).
//!
//! A [`ColumnScan`] is fed a column's name and its values one by one (strings as they
//! are stored; numbers as text) and says which kinds it holds ([`ColumnScan::findings`]),
//! each with the share of values that matched and a confidence. Identifiers with a
//! check digit (Emirates ID and payment cards: Luhn; IBAN: ISO 7064 mod 97-10) count
//! only when it is right, so a column of random digits is not taken for them.
//!
//! Values are matched as whole values (after trimming), not searched inside free
//! text: a column is personal data when its values *are* identifiers.

use std::fmt;

/// A kind of personal data.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum PiiKind {
    Email,
    Phone,
    EmiratesId,
    Iban,
    PaymentCard,
    IpAddress,
    Passport,
    PersonName,
    DateOfBirth,
}

impl PiiKind {
    pub const ALL: [PiiKind; 9] = [
        PiiKind::Email,
        PiiKind::Phone,
        PiiKind::EmiratesId,
        PiiKind::Iban,
        PiiKind::PaymentCard,
        PiiKind::IpAddress,
        PiiKind::Passport,
        PiiKind::PersonName,
        PiiKind::DateOfBirth,
    ];

    /// The kind's word, as in findings and settings (`emirates_id`).
    pub fn as_str(self) -> &'static str {
        match self {
            PiiKind::Email => "email",
            PiiKind::Phone => "phone",
            PiiKind::EmiratesId => "emirates_id",
            PiiKind::Iban => "iban",
            PiiKind::PaymentCard => "payment_card",
            PiiKind::IpAddress => "ip_address",
            PiiKind::Passport => "passport",
            PiiKind::PersonName => "person_name",
            PiiKind::DateOfBirth => "date_of_birth",
        }
    }

    /// Whether values alone can show this kind (the others are known by the column's
    /// name).
    fn by_content(self) -> bool {
        !matches!(
            self,
            PiiKind::PersonName | PiiKind::DateOfBirth | PiiKind::Passport
        )
    }
}

impl fmt::Display for PiiKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How sure a finding is.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Confidence {
    /// The column's name suggests it; its values do not show it (or cannot).
    Low,
    /// Most values have the shape, or the name and some values agree.
    Medium,
    /// Nearly all values have the shape, or their check digits are right.
    High,
}

/// One kind of personal data found in a column.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct PiiFinding {
    pub kind: PiiKind,
    /// Values that matched, of `checked` non-empty values.
    pub matched: u64,
    pub checked: u64,
    /// `matched / checked` (0 when nothing was checked).
    pub share: f64,
    pub confidence: Confidence,
    /// Whether the column's name suggests the kind.
    pub by_name: bool,
}

/// The share of values that must match for a column to be taken for a kind by its
/// values alone, and when its name suggests the kind.
const SHARE_ALONE: f64 = 0.5;
const SHARE_NAMED: f64 = 0.2;
/// The share above which a pattern (no check digit) is of high confidence.
const SHARE_HIGH: f64 = 0.9;

/// How many non-empty values of a column [`ColumnScan::add_sampled`] looks at.
pub const SCAN_LIMIT: u64 = 20_000;

/// Scans one column.
#[derive(Debug, Clone)]
pub struct ColumnScan {
    named: Vec<PiiKind>,
    checked: u64,
    matched: [u64; 9],
}

fn index(kind: PiiKind) -> usize {
    PiiKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

impl ColumnScan {
    /// A scan of the column `name`.
    pub fn new(name: &str) -> Self {
        ColumnScan {
            named: kinds_by_name(name),
            checked: 0,
            matched: [0; 9],
        }
    }

    /// Looks at one value (null and blank values are not counted).
    pub fn add(&mut self, value: &str) {
        let v = value.trim();
        if v.is_empty() {
            return;
        }
        self.checked += 1;
        for kind in matching_kinds(v) {
            self.matched[index(kind)] += 1;
        }
        if self.named.contains(&PiiKind::Passport) && is_passport_like(v) {
            self.matched[index(PiiKind::Passport)] += 1;
        }
        if self.named.contains(&PiiKind::DateOfBirth) && is_date_like(v) {
            self.matched[index(PiiKind::DateOfBirth)] += 1;
        }
    }

    /// Looks at one value while fewer than [`SCAN_LIMIT`] were looked at (the
    /// first values of a column show what it holds; the rest cost time).
    pub fn add_sampled(&mut self, value: &str) {
        if self.checked < SCAN_LIMIT {
            self.add(value);
        }
    }

    /// Values looked at so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// The kinds of personal data the column holds, most certain first.
    pub fn findings(&self) -> Vec<PiiFinding> {
        let mut out = Vec::new();
        for kind in PiiKind::ALL {
            let matched = self.matched[index(kind)];
            let share = if self.checked == 0 {
                0.0
            } else {
                matched as f64 / self.checked as f64
            };
            let by_name = self.named.contains(&kind);
            let checksum = matches!(
                kind,
                PiiKind::EmiratesId | PiiKind::Iban | PiiKind::PaymentCard
            );
            let confidence = if kind.by_content() {
                let needed = if by_name { SHARE_NAMED } else { SHARE_ALONE };
                if matched == 0 || share < needed {
                    if by_name {
                        Some(Confidence::Low)
                    } else {
                        None
                    }
                } else if checksum || share >= SHARE_HIGH || by_name {
                    Some(Confidence::High)
                } else {
                    Some(Confidence::Medium)
                }
            } else if by_name {
                // Names are known by the column's name; passports and dates of birth
                // are surer when the values have their shape.
                match kind {
                    PiiKind::PersonName => Some(Confidence::Medium),
                    _ if share >= SHARE_ALONE => Some(Confidence::High),
                    _ => Some(Confidence::Medium),
                }
            } else {
                None
            };
            if let Some(confidence) = confidence {
                out.push(PiiFinding {
                    kind,
                    matched,
                    checked: self.checked,
                    share,
                    confidence,
                    by_name,
                });
            }
        }
        out.sort_by(|a, b| {
            b.confidence
                .cmp(&a.confidence)
                .then(b.share.total_cmp(&a.share))
        });
        out
    }
}

/// The words of a column name: `customerEmail`, `customer_email` and
/// `Customer-Email` all give `customer`, `email`.
fn words(name: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut prev_lower = false;
    for c in name.chars() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            prev_lower = false;
            continue;
        }
        if c.is_uppercase() && prev_lower && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        prev_lower = c.is_lowercase() || c.is_ascii_digit();
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// The kinds a column's name suggests.
pub fn kinds_by_name(name: &str) -> Vec<PiiKind> {
    let w = words(name);
    let has = |x: &str| w.iter().any(|v| v == x);
    let joined = w.concat();
    let mut out = Vec::new();
    if has("email") || has("mail") || joined.contains("emailaddress") {
        out.push(PiiKind::Email);
    }
    if ["phone", "mobile", "msisdn", "tel", "telephone", "cell"]
        .iter()
        .any(|x| has(x))
        || joined.contains("phonenumber")
    {
        out.push(PiiKind::Phone);
    }
    if joined.contains("emiratesid")
        || joined.contains("eid") && has("eid")
        || has("emirates") && has("id")
    {
        out.push(PiiKind::EmiratesId);
    }
    if has("iban") {
        out.push(PiiKind::Iban);
    }
    if (has("card") && (has("number") || has("no") || has("num") || has("pan")))
        || has("pan")
        || joined.contains("cardnumber")
        || joined.contains("creditcard")
    {
        out.push(PiiKind::PaymentCard);
    }
    if has("ip") || joined.contains("ipaddress") || joined.contains("ipaddr") {
        out.push(PiiKind::IpAddress);
    }
    if has("passport") {
        out.push(PiiKind::Passport);
    }
    let name_word = [
        "name",
        "firstname",
        "lastname",
        "surname",
        "fullname",
        "forename",
        "givenname",
    ]
    .iter()
    .any(|x| has(x) || joined == *x);
    let not_a_person = [
        "file",
        "user",
        "host",
        "model",
        "column",
        "feature",
        "project",
        "product",
        "company",
        "dataset",
        "table",
        "run",
        "experiment",
        "class",
        "event",
        "city",
        "country",
        "street",
        "bank",
        "brand",
        "category",
        "job",
        "key",
    ]
    .iter()
    .any(|x| has(x));
    if name_word && !not_a_person {
        out.push(PiiKind::PersonName);
    }
    if has("dob")
        || joined.contains("dateofbirth")
        || joined.contains("birthdate")
        || joined.contains("birthday")
        || (has("birth") && has("date"))
    {
        out.push(PiiKind::DateOfBirth);
    }
    out
}

/// The kinds a single value has the shape of (and, for identifiers with one, the
/// right check digit).
pub fn matching_kinds(value: &str) -> Vec<PiiKind> {
    let v = value.trim();
    let mut out = Vec::new();
    if is_email(v) {
        out.push(PiiKind::Email);
    }
    if is_emirates_id(v) {
        out.push(PiiKind::EmiratesId);
    } else if is_payment_card(v) {
        out.push(PiiKind::PaymentCard);
    } else if is_phone(v) {
        out.push(PiiKind::Phone);
    }
    if is_iban(v) {
        out.push(PiiKind::Iban);
    }
    if is_ip(v) {
        out.push(PiiKind::IpAddress);
    }
    out
}

/// An email address: `local@domain.tld`, the domain of two labels or more and a
/// top-level domain of letters.
pub fn is_email(v: &str) -> bool {
    let Some((local, domain)) = v.rsplit_once('@') else {
        return false;
    };
    if local.is_empty() || local.len() > 64 || domain.len() > 253 {
        return false;
    }
    let local_ok = local
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || "._%+-'".contains(c))
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..");
    let labels: Vec<&str> = domain.split('.').collect();
    let domain_ok = labels.len() >= 2
        && labels.iter().all(|l| {
            !l.is_empty()
                && l.len() <= 63
                && l.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        })
        && labels
            .last()
            .is_some_and(|t| t.len() >= 2 && t.chars().all(|c| c.is_ascii_alphabetic()));
    local_ok && domain_ok
}

/// The digits of `v` when it is only digits and the separators `sep` allows.
fn digits_of(v: &str, sep: &str) -> Option<String> {
    let mut d = String::with_capacity(v.len());
    for c in v.chars() {
        if c.is_ascii_digit() {
            d.push(c);
        } else if !sep.contains(c) {
            return None;
        }
    }
    Some(d)
}

/// Luhn's check (ISO/IEC 7812): the last digit checks the others.
pub fn luhn(digits: &str) -> bool {
    if digits.len() < 2 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let sum: u32 = digits
        .bytes()
        .rev()
        .enumerate()
        .map(|(i, b)| {
            let d = u32::from(b - b'0');
            if i % 2 == 1 {
                let x = d * 2;
                if x > 9 {
                    x - 9
                } else {
                    x
                }
            } else {
                d
            }
        })
        .sum();
    sum.is_multiple_of(10)
}

/// An Emirates ID number: `784-YYYY-NNNNNNN-C` (dashes or spaces optional): 784,
/// the year of birth, seven digits, and a Luhn check digit.
pub fn is_emirates_id(v: &str) -> bool {
    let Some(d) = digits_of(v, "- ") else {
        return false;
    };
    if d.len() != 15 || !d.starts_with("784") {
        return false;
    }
    // With separators, they must be where the format puts them.
    if d.len() != v.len() {
        let groups: Vec<&str> = v.split(['-', ' ']).collect();
        if groups.iter().map(|g| g.len()).collect::<Vec<_>>() != [3, 4, 7, 1] {
            return false;
        }
    }
    let year: u32 = d[3..7].parse().unwrap_or(0);
    (1900..=2100).contains(&year) && luhn(&d)
}

/// A payment card number: 13 to 19 digits (spaces or dashes allowed) of a known
/// issuer range, with a right Luhn check digit.
pub fn is_payment_card(v: &str) -> bool {
    let Some(d) = digits_of(v, "- ") else {
        return false;
    };
    if !(13..=19).contains(&d.len()) || !luhn(&d) {
        return false;
    }
    let p = |n: usize| d[..n].parse::<u32>().unwrap_or(0);
    let len = d.len();
    match d.as_bytes()[0] {
        b'4' => matches!(len, 13 | 16 | 19),                // Visa
        b'5' => (51..=55).contains(&p(2)) && len == 16,     // Mastercard
        b'2' => (2221..=2720).contains(&p(4)) && len == 16, // Mastercard 2-series
        b'3' => {
            (matches!(p(2), 34 | 37) && len == 15)                               // American Express
                || ((3528..=3589).contains(&p(4)) && (16..=19).contains(&len))   // JCB
                || ((300..=305).contains(&p(3)) || matches!(p(2), 36 | 38 | 39)) && (14..=19).contains(&len)
            // Diners
        }
        b'6' => {
            (p(4) == 6011 || p(2) == 65 || (644..=649).contains(&p(3)) || p(2) == 62)
                && (16..=19).contains(&len) // Discover, UnionPay
        }
        _ => false,
    }
}

/// A phone number: UAE numbers (`+971 5X XXX XXXX`, `00971…`, `05X XXX XXXX`,
/// landlines `0X XXX XXXX`) and international numbers written with their country
/// code after `+` or `00` (E.164: at most 15 digits). Digits alone without a `+`,
/// `00` or the UAE's leading 0 are not taken for phone numbers.
pub fn is_phone(v: &str) -> bool {
    let (plus, rest) = match v.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, v),
    };
    let Some(d) = digits_of(rest, " -.()") else {
        return false;
    };
    // Separators alone, or more of them than digits, are not a number.
    if d.is_empty() {
        return false;
    }
    let international = if plus {
        Some(d.as_str())
    } else {
        d.strip_prefix("00")
    };
    let uae_national = |n: &str| -> bool {
        // After 971 or the leading 0: mobile 5[0-9] + 7 digits; landline [234679] + 7.
        (n.len() == 9 && n.starts_with('5'))
            || (n.len() == 8 && matches!(n.as_bytes()[0], b'2' | b'3' | b'4' | b'6' | b'7' | b'9'))
    };
    match international {
        Some(i) => {
            if let Some(n) = i.strip_prefix("971") {
                uae_national(n)
            } else {
                (8..=15).contains(&i.len()) && !i.starts_with('0')
            }
        }
        None => d.strip_prefix('0').is_some_and(uae_national),
    }
}

/// The IBAN's length in each country that has one (ISO 13616 registry).
fn iban_length(country: &str) -> Option<usize> {
    Some(match country {
        "AE" => 23,
        "AD" => 24,
        "AT" => 20,
        "AZ" => 28,
        "BA" => 20,
        "BE" => 16,
        "BG" => 22,
        "BH" => 22,
        "BR" => 29,
        "CH" => 21,
        "CR" => 22,
        "CY" => 28,
        "CZ" => 24,
        "DE" => 22,
        "DK" => 18,
        "DO" => 28,
        "EE" => 20,
        "EG" => 29,
        "ES" => 24,
        "FI" => 18,
        "FO" => 18,
        "FR" => 27,
        "GB" => 22,
        "GE" => 22,
        "GI" => 23,
        "GL" => 18,
        "GR" => 27,
        "GT" => 28,
        "HR" => 21,
        "HU" => 28,
        "IE" => 22,
        "IL" => 23,
        "IQ" => 23,
        "IS" => 26,
        "IT" => 27,
        "JO" => 30,
        "KW" => 30,
        "KZ" => 20,
        "LB" => 28,
        "LI" => 21,
        "LT" => 20,
        "LU" => 20,
        "LV" => 21,
        "MC" => 27,
        "MD" => 24,
        "ME" => 22,
        "MK" => 19,
        "MR" => 27,
        "MT" => 31,
        "MU" => 30,
        "NL" => 18,
        "NO" => 15,
        "PK" => 24,
        "PL" => 28,
        "PS" => 29,
        "PT" => 25,
        "QA" => 29,
        "RO" => 24,
        "RS" => 22,
        "SA" => 24,
        "SE" => 24,
        "SI" => 19,
        "SK" => 24,
        "SM" => 27,
        "TN" => 24,
        "TR" => 26,
        "UA" => 29,
        "VG" => 24,
        "XK" => 20,
        _ => return None,
    })
}

/// An IBAN (ISO 13616): a country code, two check digits, the account number, the
/// country's length, and the ISO 7064 mod 97-10 check. Spaces allowed, any case.
/// The UAE's: `AE` + 2 check digits + 3-digit bank code + 16-digit account.
pub fn is_iban(v: &str) -> bool {
    let s: String = v
        .chars()
        .filter(|c| *c != ' ')
        .collect::<String>()
        .to_ascii_uppercase();
    if s.len() < 15 || s.len() > 34 || !s.bytes().all(|b| b.is_ascii_alphanumeric()) {
        return false;
    }
    let (country, check) = (&s[..2], &s[2..4]);
    if !country.bytes().all(|b| b.is_ascii_uppercase())
        || !check.bytes().all(|b| b.is_ascii_digit())
    {
        return false;
    }
    if iban_length(country) != Some(s.len()) {
        return false;
    }
    if country == "AE" && !s[4..].bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    // Move the first four characters to the end, letters to numbers (A = 10), mod 97.
    let rearranged = s[4..].bytes().chain(s[..4].bytes());
    let mut rem: u32 = 0;
    for b in rearranged {
        let n = if b.is_ascii_digit() {
            u32::from(b - b'0')
        } else {
            u32::from(b - b'A') + 10
        };
        rem = if n >= 10 {
            (rem * 100 + n) % 97
        } else {
            (rem * 10 + n) % 97
        };
    }
    rem == 1
}

/// An IPv4 address (four octets) or an IPv6 address.
pub fn is_ip(v: &str) -> bool {
    if v.contains(':') {
        return v.parse::<std::net::Ipv6Addr>().is_ok();
    }
    v.split('.').count() == 4 && v.parse::<std::net::Ipv4Addr>().is_ok()
}

/// A passport-like number: one or two letters and six to nine digits, or eight or
/// nine digits (taken for a passport only in a column named so).
fn is_passport_like(v: &str) -> bool {
    let s = v.to_ascii_uppercase();
    let letters = s.bytes().take_while(|b| b.is_ascii_uppercase()).count();
    let digits = &s[letters..];
    letters <= 2
        && digits.bytes().all(|b| b.is_ascii_digit())
        && if letters == 0 {
            (8..=9).contains(&digits.len())
        } else {
            (6..=9).contains(&digits.len())
        }
}

/// A calendar date: `YYYY-MM-DD` (optionally with a time), `DD/MM/YYYY` or
/// `MM/DD/YYYY`, `DD-MM-YYYY`, `DD.MM.YYYY`.
fn is_date_like(v: &str) -> bool {
    let date = v.split(['T', ' ']).next().unwrap_or(v);
    let parts: Vec<&str> = date.split(['-', '/', '.']).collect();
    if parts.len() != 3
        || !parts
            .iter()
            .all(|p| !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()))
    {
        return false;
    }
    let n = |p: &str| p.parse::<u32>().unwrap_or(0);
    let (y, a, b) = if parts[0].len() == 4 {
        (n(parts[0]), n(parts[1]), n(parts[2]))
    } else if parts[2].len() == 4 {
        (n(parts[2]), n(parts[1]), n(parts[0]))
    } else {
        return false;
    };
    (1900..=2100).contains(&y) && (1..=31).contains(&a.max(b)) && (1..=12).contains(&a.min(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A valid Emirates ID from its first 14 digits (the Luhn digit computed).
    fn with_luhn(body: &str) -> String {
        for d in 0..10 {
            let s = format!("{body}{d}");
            if luhn(&s) {
                return s;
            }
        }
        unreachable!("one digit always fits")
    }

    #[test]
    fn emirates_ids_count_only_with_their_check_digit() {
        let id = with_luhn("78419901234567");
        assert!(is_emirates_id(&id));
        let dashed = format!("{}-{}-{}-{}", &id[..3], &id[3..7], &id[7..14], &id[14..]);
        assert!(is_emirates_id(&dashed), "{dashed}");
        let last = id.as_bytes()[14] - b'0';
        let wrong = format!("{}{}", &id[..14], (last + 1) % 10);
        assert!(!is_emirates_id(&wrong));
        assert!(!is_emirates_id("785-1990-1234567-1"));
        assert!(
            !is_emirates_id("784-19-901234567-1"),
            "separators where the format has none"
        );
        assert!(!is_payment_card(&id), "an Emirates ID is not a card");
    }

    #[test]
    fn ibans_are_checked_by_mod_97() {
        // The example IBANs of the ISO 13616 registry.
        for ok in [
            "AE070331234567890123456",
            "GB82 WEST 1234 5698 7654 32",
            "DE89370400440532013000",
            "sa0380000000608010167519",
        ] {
            assert!(is_iban(ok), "{ok}");
        }
        for bad in [
            "AE070331234567890123457",
            "AE07033123456789012345",
            "GB82WEST12345698765433",
            "XX82WEST12345698765432",
        ] {
            assert!(!is_iban(bad), "{bad}");
        }
    }

    #[test]
    fn payment_cards_need_an_issuer_range_and_luhn() {
        for ok in [
            "4111 1111 1111 1111",
            "5500-0000-0000-0004",
            "340000000000009",
            "6011000000000004",
            "2223000048400011",
        ] {
            assert!(is_payment_card(ok), "{ok}");
        }
        for bad in [
            "4111 1111 1111 1112",
            "1234567812345670",
            "41111111111111",
            "4111-1111-1111-111x",
        ] {
            assert!(!is_payment_card(bad), "{bad}");
        }
    }

    #[test]
    fn phones_uae_and_international() {
        for ok in [
            "+971 50 123 4567",
            "00971501234567",
            "050-123-4567",
            "04 123 4567",
            "+44 20 7946 0958",
            "+1 (415) 555-2671",
        ] {
            assert!(is_phone(ok), "{ok}");
        }
        for bad in [
            "12345",
            "501234567",
            "+971 1 123 4567",
            "0501234",
            "2024-01-01",
            "+",
            "3.14159",
        ] {
            assert!(!is_phone(bad), "{bad}");
        }
    }

    #[test]
    fn emails_and_ips() {
        for ok in [
            "alice@example.com",
            "a.b+tag@sub.example.ae",
            "o'neil@example.co.uk",
        ] {
            assert!(is_email(ok), "{ok}");
        }
        for bad in [
            "alice@",
            "@example.com",
            "alice@example",
            "a..b@example.com",
            "alice@exa_mple.com",
            "not an email",
        ] {
            assert!(!is_email(bad), "{bad}");
        }
        for ok in [
            "10.0.0.1",
            "192.168.1.254",
            "::1",
            "2001:db8::8a2e:370:7334",
        ] {
            assert!(is_ip(ok), "{ok}");
        }
        for bad in ["10.0.0", "256.1.1.1", "1.2.3.4.5", "3.14", "abc"] {
            assert!(!is_ip(bad), "{bad}");
        }
    }

    #[test]
    fn names_of_columns() {
        assert_eq!(kinds_by_name("customerEmail"), vec![PiiKind::Email]);
        assert_eq!(kinds_by_name("Mobile_Number"), vec![PiiKind::Phone]);
        assert_eq!(kinds_by_name("emirates_id"), vec![PiiKind::EmiratesId]);
        assert_eq!(kinds_by_name("EmiratesID"), vec![PiiKind::EmiratesId]);
        assert_eq!(kinds_by_name("first_name"), vec![PiiKind::PersonName]);
        assert_eq!(kinds_by_name("name"), vec![PiiKind::PersonName]);
        assert_eq!(kinds_by_name("model_name"), vec![]);
        assert_eq!(kinds_by_name("file_name"), vec![]);
        assert_eq!(kinds_by_name("date_of_birth"), vec![PiiKind::DateOfBirth]);
        assert_eq!(kinds_by_name("DOB"), vec![PiiKind::DateOfBirth]);
        assert_eq!(kinds_by_name("passport_no"), vec![PiiKind::Passport]);
        assert_eq!(kinds_by_name("client_ip"), vec![PiiKind::IpAddress]);
        assert_eq!(kinds_by_name("card_number"), vec![PiiKind::PaymentCard]);
        assert_eq!(kinds_by_name("amount"), vec![]);
        assert_eq!(kinds_by_name("tip"), vec![]);
    }

    #[test]
    fn a_column_is_found_by_its_values_and_its_name() {
        let mut s = ColumnScan::new("contact");
        for i in 0..100 {
            s.add(&format!("user{i}@example.com"));
        }
        s.add("");
        let f = s.findings();
        assert_eq!(f.len(), 1, "{f:?}");
        assert_eq!(f[0].kind, PiiKind::Email);
        assert_eq!((f[0].matched, f[0].checked), (100, 100));
        assert_eq!(f[0].confidence, Confidence::High);
        assert!(!f[0].by_name);

        // Numbers that happen to pass Luhn now and then are not cards.
        let mut n = ColumnScan::new("amount");
        for i in 0..1000u64 {
            n.add(&(4_000_000_000_000_000 + i * 7919).to_string());
        }
        let f = n.findings();
        assert!(f.iter().all(|f| f.kind != PiiKind::PaymentCard), "{f:?}");

        // A name column is found by its name alone.
        let mut p = ColumnScan::new("full_name");
        p.add("Fatima Al Mansoori");
        let f = p.findings();
        assert_eq!(f[0].kind, PiiKind::PersonName);
        assert_eq!(f[0].confidence, Confidence::Medium);

        let mut d = ColumnScan::new("dob");
        d.add("1990-04-01");
        d.add("01/04/1990");
        assert_eq!(d.findings()[0].confidence, Confidence::High);
    }
}
