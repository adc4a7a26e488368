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
    pub fn by_content(self) -> bool {
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
    name_column: NameColumn,
    /// A column of versions (`assembly_version`, `build`): four-part versions are
    /// not IP addresses.
    versions: bool,
    checked: u64,
    matched: [u64; 9],
}

fn index(kind: PiiKind) -> usize {
    PiiKind::ALL.iter().position(|k| *k == kind).unwrap_or(0)
}

/// Values that stand for a missing one in exported tables; not counted.
fn is_null_token(v: &str) -> bool {
    [
        "na", "n/a", "nan", "none", "null", "nil", "-", "--", "unknown", "?",
    ]
    .iter()
    .any(|t| v.eq_ignore_ascii_case(t))
}

impl ColumnScan {
    /// A scan of the column `name`.
    pub fn new(name: &str) -> Self {
        ColumnScan {
            named: kinds_by_name(name),
            name_column: person_name_column(&words(name)),
            versions: words(name)
                .iter()
                .any(|w| ["version", "ver", "build", "release", "revision"].contains(&w.as_str())),
            checked: 0,
            matched: [0; 9],
        }
    }

    /// Looks at one value (null, blank and null-like values such as `NA` are not
    /// counted).
    pub fn add(&mut self, value: &str) {
        let v = value.trim();
        if v.is_empty() || is_null_token(v) {
            return;
        }
        self.checked += 1;
        let kinds = matching_kinds(v);
        for kind in &kinds {
            self.matched[index(*kind)] += 1;
        }
        if self.named.contains(&PiiKind::Phone)
            && !kinds.contains(&PiiKind::Phone)
            && is_bare_uae_mobile(v)
        {
            self.matched[index(PiiKind::Phone)] += 1;
        }
        if self.named.contains(&PiiKind::Passport) && is_passport_like(v) {
            self.matched[index(PiiKind::Passport)] += 1;
        }
        if self.named.contains(&PiiKind::DateOfBirth) && is_date_like(v) {
            self.matched[index(PiiKind::DateOfBirth)] += 1;
        }
        if self.name_column != NameColumn::No && looks_like_person_name(v) {
            self.matched[index(PiiKind::PersonName)] += 1;
        }
    }

    /// Looks at one value while fewer than [`SCAN_LIMIT`] were looked at (the
    /// first values of a column show what it holds; the rest cost time).
    pub fn add_sampled(&mut self, value: &str) {
        if self.wants_more() {
            self.add(value);
        }
    }

    /// Whether [`ColumnScan::add_sampled`] still looks at values: a caller that must
    /// format a value first (a number as its digits) asks before doing so.
    pub fn wants_more(&self) -> bool {
        self.checked < SCAN_LIMIT
    }

    /// Values looked at so far.
    pub fn checked(&self) -> u64 {
        self.checked
    }

    /// The kinds of personal data the column holds, most certain first. A column
    /// none of whose values were looked at (a type that is not scanned) has
    /// findings by name only for the kinds known by name.
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
            let confidence = if kind == PiiKind::IpAddress && self.versions {
                None
            } else if kind.by_content() {
                let needed = if by_name { SHARE_NAMED } else { SHARE_ALONE };
                if self.checked == 0 {
                    None
                } else if matched == 0 || share < needed {
                    by_name.then_some(Confidence::Low)
                } else if checksum || share >= SHARE_HIGH || (by_name && share >= SHARE_ALONE) {
                    Some(Confidence::High)
                } else {
                    Some(Confidence::Medium)
                }
            } else if kind == PiiKind::PersonName {
                match (self.name_column, share >= SHARE_ALONE) {
                    (NameColumn::No, _) => None,
                    (NameColumn::Person, true) => Some(Confidence::High),
                    (NameColumn::Person, false) => Some(Confidence::Medium),
                    (NameColumn::Maybe, true) => Some(Confidence::Medium),
                    (NameColumn::Maybe, false) => None,
                }
            } else if by_name {
                // Passports and dates of birth: surer when the values have their shape.
                if share >= SHARE_ALONE {
                    Some(Confidence::High)
                } else {
                    Some(Confidence::Medium)
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
                    by_name: by_name
                        || (kind == PiiKind::PersonName && self.name_column != NameColumn::No),
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
    let chars: Vec<char> = name.chars().collect();
    let mut out = Vec::new();
    let mut cur = String::new();
    for (i, &c) in chars.iter().enumerate() {
        if !c.is_alphanumeric() {
            if !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
            continue;
        }
        if let Some(&p) = i.checked_sub(1).and_then(|j| chars.get(j)) {
            let next_lower = chars.get(i + 1).is_some_and(|n| n.is_lowercase());
            // customerEmail | IBANNumber | email2 | ipv4
            let split = p.is_alphanumeric()
                && ((c.is_uppercase() && (p.is_lowercase() || p.is_ascii_digit()))
                    || (c.is_uppercase() && p.is_uppercase() && next_lower)
                    || (c.is_ascii_digit() != p.is_ascii_digit()));
            if split && !cur.is_empty() {
                out.push(std::mem::take(&mut cur));
            }
        }
        cur.extend(c.to_lowercase());
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// Words that make a column a fact about something, not the thing itself:
/// `is_mobile`, `email_opened`, `eid_holiday`, `pan_angle`, `assembly_version`.
const NOT_THE_VALUE: [&str; 22] = [
    "is", "has", "count", "counts", "type", "app", "version", "ver", "build", "release", "holiday",
    "fitr", "adha", "angle", "month", "opened", "clicked", "flag", "verified", "domain", "length",
    "len",
];

/// Words that say a name column names a person.
const PERSON_WORDS: [&str; 24] = [
    "first",
    "last",
    "full",
    "given",
    "middle",
    "family",
    "maiden",
    "customer",
    "client",
    "patient",
    "employee",
    "holder",
    "beneficiary",
    "person",
    "member",
    "contact",
    "applicant",
    "passenger",
    "guest",
    "owner",
    "student",
    "father",
    "mother",
    "spouse",
];

/// The kinds a column's name suggests.
pub fn kinds_by_name(name: &str) -> Vec<PiiKind> {
    let w = words(name);
    let has = |x: &str| w.iter().any(|v| v == x);
    let joined = w.concat();
    let mut out = Vec::new();
    if NOT_THE_VALUE.iter().any(|x| has(x)) {
        return out;
    }
    let number = has("number") || has("no") || has("num") || has("nr");
    if has("email") || has("mail") || joined.contains("emailaddress") {
        out.push(PiiKind::Email);
    }
    if [
        "phone",
        "mobile",
        "msisdn",
        "tel",
        "telephone",
        "landline",
        "whatsapp",
    ]
    .iter()
    .any(|x| has(x))
        || (has("cell") && (number || has("phone")))
        || joined.contains("phonenumber")
    {
        out.push(PiiKind::Phone);
    }
    if joined.contains("emiratesid")
        || (has("emirates") && has("id"))
        || joined == "eid"
        || (has("eid") && (number || has("id")))
    {
        out.push(PiiKind::EmiratesId);
    }
    if has("iban") {
        out.push(PiiKind::Iban);
    }
    if (has("card") && (number || has("pan")))
        || (has("pan") && w.len() == 1)
        || joined.contains("cardnumber")
        || joined.contains("creditcard")
        || joined.contains("debitcard")
    {
        out.push(PiiKind::PaymentCard);
    }
    if has("ip") || has("ipv") || has("ipaddress") || has("ipaddr") {
        out.push(PiiKind::IpAddress);
    }
    if has("passport") {
        out.push(PiiKind::Passport);
    }
    if person_name_column(&w) == NameColumn::Person {
        out.push(PiiKind::PersonName);
    }
    if has("dob")
        || joined.contains("dateofbirth")
        || joined.contains("birthdate")
        || joined.contains("birthday")
        || (has("birth") && (has("date") || has("dt") || has("year") || has("day")))
    {
        out.push(PiiKind::DateOfBirth);
    }
    out
}

/// Whether a column's words name a person's name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum NameColumn {
    No,
    /// `name`, or `<something>_name` of unknown sort: its values decide.
    Maybe,
    /// `first_name`, `customer_name`, `surname`: a person's, whatever the values.
    Person,
}

fn person_name_column(w: &[String]) -> NameColumn {
    let has = |x: &str| w.iter().any(|v| v == x);
    if [
        "firstname",
        "lastname",
        "surname",
        "fullname",
        "forename",
        "givenname",
        "middlename",
        "familyname",
        "maidenname",
    ]
    .iter()
    .any(|x| has(x))
    {
        return NameColumn::Person;
    }
    if !(has("name") || has("names")) {
        return NameColumn::No;
    }
    if PERSON_WORDS.iter().any(|x| has(x)) {
        NameColumn::Person
    } else if w.len() == 1 {
        NameColumn::Maybe
    } else {
        // `store_name`, `metric_name`, `user_name`: names of things (or handles),
        // unless the values look like people's names.
        NameColumn::Maybe
    }
}

/// Whether a value looks like a person's name: two to four words of letters (with
/// `'`, `-` and `.`), each capitalised (or in a script without case).
fn looks_like_person_name(v: &str) -> bool {
    let tokens: Vec<&str> = v.split_whitespace().collect();
    (2..=4).contains(&tokens.len())
        && tokens.iter().all(|t| {
            let mut chars = t.chars();
            let Some(first) = chars.next() else {
                return false;
            };
            (first.is_uppercase()
                || (first.is_alphabetic() && !first.is_lowercase() && !first.is_ascii()))
                && t.chars().all(|c| c.is_alphabetic() || "'-.".contains(c))
                && t.chars().any(char::is_alphabetic)
        })
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

/// An email address: `local@domain.tld`, the domain of two labels or more (the one
/// before the top-level domain with a letter), a top-level domain of letters or an
/// internationalized one (`xn--…`, or in another script).
pub fn is_email(v: &str) -> bool {
    let Some((local, domain)) = v.rsplit_once('@') else {
        return false;
    };
    if local.is_empty() || local.chars().count() > 64 || domain.len() > 253 {
        return false;
    }
    let local_ok = local
        .chars()
        .all(|c| c.is_alphanumeric() || "._%+-'".contains(c))
        && !local.starts_with('.')
        && !local.ends_with('.')
        && !local.contains("..");
    let labels: Vec<&str> = domain.split('.').collect();
    let label_ok = |l: &&str| {
        !l.is_empty()
            && l.chars().count() <= 63
            && l.chars().all(|c| c.is_alphanumeric() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    let tld_ok = labels.last().is_some_and(|t| {
        (t.chars().count() >= 2 && t.chars().all(char::is_alphabetic))
            || (t.starts_with("xn--")
                && t.len() > 4
                && t[4..]
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-'))
    });
    let second_has_letter =
        labels.len() >= 2 && labels[labels.len() - 2].chars().any(char::is_alphabetic);
    local_ok && labels.len() >= 2 && labels.iter().all(label_ok) && tld_ok && second_has_letter
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
    let long = (16..=19).contains(&len);
    match d.as_bytes()[0] {
        // Visa
        b'4' => matches!(len, 13 | 16 | 19),
        // Mastercard 51-55; Maestro 50, 56-59
        b'5' => ((51..=55).contains(&p(2)) && len == 16) || matches!(p(2), 50 | 56..=59),
        // Mastercard 2221-2720; Mir 2200-2204
        b'2' => {
            ((2221..=2720).contains(&p(4)) && len == 16) || ((2200..=2204).contains(&p(4)) && long)
        }
        b'3' => {
            // American Express
            (matches!(p(2), 34 | 37) && len == 15)
                // JCB
                || ((3528..=3589).contains(&p(4)) && long)
                // Diners Club
                || (((300..=305).contains(&p(3)) || p(4) == 3095 || matches!(p(2), 36 | 38 | 39))
                    && (14..=19).contains(&len))
        }
        // Discover 6011, 644-649, 65; UnionPay 62; RuPay 60; Maestro 6x
        b'6' => long || matches!(p(2), 60..=69),
        // UnionPay 81-82
        b'8' => matches!(p(2), 81 | 82) && long,
        // Troy
        b'9' => p(4) == 9792 && len == 16,
        _ => false,
    }
}

/// A phone number: UAE numbers (`+971 5X XXX XXXX`, `+971 (0) 50 …`, `00971…`,
/// `971…`, `05X XXX XXXX`, landlines `0X XXX XXXX`) and international numbers
/// written with `+` and their country code (E.164: at most 15 digits), or `00` and
/// the code with separators. Digits alone without a `+`, `00971`/`971` or the UAE's
/// leading 0, decimals, and zero-padded codes are not taken for phone numbers.
pub fn is_phone(v: &str) -> bool {
    let (plus, rest) = match v.strip_prefix('+') {
        Some(r) => (true, r),
        None => (false, v),
    };
    // A decimal number (`0.23456789`) is not a phone number.
    if rest
        .trim_start_matches('-')
        .split_once('.')
        .is_some_and(|(a, b)| {
            !a.is_empty() && !b.is_empty() && a.bytes().chain(b.bytes()).all(|c| c.is_ascii_digit())
        })
    {
        return false;
    }
    let Some(d) = digits_of(rest, " -.()") else {
        return false;
    };
    if d.is_empty() {
        return false;
    }
    let bare = d.len() == rest.len();
    let uae = |n: &str| uae_national(n.strip_prefix('0').unwrap_or(n));
    if plus {
        return match d.strip_prefix("971") {
            Some(n) => uae(n),
            None => (8..=15).contains(&d.len()) && !d.starts_with('0'),
        };
    }
    if let Some(n) = d.strip_prefix("00971") {
        return uae(n);
    }
    if let Some(i) = d.strip_prefix("00") {
        // Another country after 00: only when written in groups (`0044 20 7946 0958`);
        // a run of digits starting 00 is more often a zero-padded code.
        return !bare && (8..=15).contains(&i.len()) && !i.starts_with('0');
    }
    if bare {
        if let Some(n) = d.strip_prefix("971") {
            return uae_national(n);
        }
        // 05X XXX XXXX written without separators: a mobile only (a bare 0 and eight
        // digits is as often a zero-padded code).
        return d.len() == 10 && d.starts_with("05") && uae_national(&d[1..]);
    }
    // Written in groups: the first group is the trunk prefix and area or mobile code
    // (`04`, `050`, `(04)`), never a longer run (`02134-1234` is a ZIP+4 code).
    let first = rest
        .split([' ', '-', '.', ')'])
        .map(|g| g.trim_start_matches('('))
        .find(|g| !g.is_empty())
        .unwrap_or_default();
    (2..=3).contains(&first.len())
        && first.starts_with('0')
        && d.strip_prefix('0').is_some_and(uae_national)
}

/// A UAE number after the country code or trunk 0: mobile 5X and seven digits,
/// landline 2, 3, 4, 6, 7 or 9 and seven digits.
fn uae_national(n: &str) -> bool {
    (n.len() == 9 && n.starts_with('5'))
        || (n.len() == 8 && matches!(n.as_bytes()[0], b'2' | b'3' | b'4' | b'6' | b'7' | b'9'))
}

/// A UAE mobile number without its trunk 0 (`501234567`): a phone only in a column
/// named so.
fn is_bare_uae_mobile(v: &str) -> bool {
    v.len() == 9 && v.starts_with('5') && v.bytes().all(|b| b.is_ascii_digit())
}

/// The IBAN's length in each country that has one (ISO 13616 registry).
fn iban_length(country: &str) -> Option<usize> {
    Some(match country {
        "AE" => 23,
        "AD" => 24,
        "AL" => 28,
        "BI" => 27,
        "BY" => 28,
        "DJ" => 27,
        "FK" => 18,
        "HN" => 28,
        "LC" => 32,
        "LY" => 25,
        "MN" => 20,
        "NI" => 28,
        "OM" => 23,
        "RU" => 33,
        "SC" => 31,
        "SD" => 18,
        "SO" => 23,
        "ST" => 25,
        "SV" => 28,
        "TL" => 23,
        "VA" => 22,
        "YE" => 30,
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
        .filter(|c| !matches!(c, ' ' | '-' | '\u{a0}'))
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

/// An IPv4 address (four octets, leading zeros allowed), or an IPv6 address; with a
/// port (`10.0.0.1:8080`, `[::1]:443`) or a prefix length (`10.0.0.0/8`).
pub fn is_ip(v: &str) -> bool {
    let v = match v.rsplit_once('/') {
        Some((a, len))
            if !len.is_empty() && len.len() <= 3 && len.bytes().all(|b| b.is_ascii_digit()) =>
        {
            a
        }
        _ => v,
    };
    if v.parse::<std::net::SocketAddr>().is_ok() {
        return true;
    }
    if v.contains(':') {
        let v = v.trim_start_matches('[').trim_end_matches(']');
        let v = v.split_once('%').map_or(v, |(a, _)| a);
        return v.parse::<std::net::Ipv6Addr>().is_ok();
    }
    let octets: Vec<&str> = v.split('.').collect();
    octets.len() == 4
        && octets.iter().all(|o| {
            !o.is_empty()
                && o.len() <= 3
                && o.bytes().all(|b| b.is_ascii_digit())
                && o.parse::<u16>().is_ok_and(|n| n <= 255)
        })
}

/// A passport-like number: six to nine letters and digits, at least five of them
/// digits (taken for a passport only in a column named so).
fn is_passport_like(v: &str) -> bool {
    (6..=9).contains(&v.len())
        && v.bytes().all(|b| b.is_ascii_alphanumeric())
        && v.bytes().filter(u8::is_ascii_digit).count() >= 5
}

/// A calendar date: `YYYY-MM-DD` (optionally with a time), `YYYYMMDD`,
/// `DD/MM/YYYY` or `MM/DD/YYYY`, `DD-MM-YYYY`, `DD.MM.YYYY`, `DD-Mon-YYYY`.
fn is_date_like(v: &str) -> bool {
    let date = v.split(['T', ' ']).next().unwrap_or(v);
    let n = |p: &str| p.parse::<u32>().unwrap_or(0);
    let plausible = |y: u32, a: u32, b: u32| {
        (1900..=2100).contains(&y) && (1..=31).contains(&a.max(b)) && (1..=12).contains(&a.min(b))
    };
    if date.len() == 8 && date.bytes().all(|b| b.is_ascii_digit()) {
        let (y, m, d) = (n(&date[..4]), n(&date[4..6]), n(&date[6..]));
        return (1900..=2100).contains(&y) && (1..=12).contains(&m) && (1..=31).contains(&d);
    }
    let parts: Vec<&str> = date.split(['-', '/', '.']).collect();
    if parts.len() != 3 || parts.iter().any(|p| p.is_empty()) {
        return false;
    }
    const MONTHS: [&str; 12] = [
        "jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec",
    ];
    if let Some(m) = MONTHS
        .iter()
        .position(|m| parts[1].len() >= 3 && parts[1][..3].eq_ignore_ascii_case(m))
    {
        return parts[2].len() == 4 && plausible(n(parts[2]), m as u32 + 1, n(parts[0]));
    }
    if !parts.iter().all(|p| p.bytes().all(|b| b.is_ascii_digit())) {
        return false;
    }
    if parts[0].len() == 4 {
        plausible(n(parts[0]), n(parts[1]), n(parts[2]))
    } else if parts[2].len() == 4 {
        plausible(n(parts[2]), n(parts[1]), n(parts[0]))
    } else {
        false
    }
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
        // A bare `name` (or `store_name`) is decided by its values.
        assert_eq!(kinds_by_name("name"), vec![]);
        assert_eq!(kinds_by_name("customer_name"), vec![PiiKind::PersonName]);
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
        assert_eq!(f[0].confidence, Confidence::High);
        let mut p = ColumnScan::new("surname");
        p.add("al-mansoori");
        assert_eq!(p.findings()[0].confidence, Confidence::Medium);

        let mut d = ColumnScan::new("dob");
        d.add("1990-04-01");
        d.add("01/04/1990");
        assert_eq!(d.findings()[0].confidence, Confidence::High);
    }

    #[test]
    fn ordinary_columns_are_not_personal_data() {
        let scan = |name: &str, values: &[String]| {
            let mut s = ColumnScan::new(name);
            for v in values {
                s.add(v);
            }
            s.findings()
        };
        let many = |f: &dyn Fn(usize) -> String| (0..1000).map(f).collect::<Vec<_>>();
        // Decimals written as text (a float column with an `NA` in it).
        assert_eq!(
            scan(
                "churn_prob",
                &many(&|i| format!("0.{:08}", 23_456_789 + i * 7919))
            ),
            vec![]
        );
        assert_eq!(
            scan("cell_type", &many(&|i| format!("0.5{:08}", i))),
            vec![]
        );
        // ZIP+4, GTIN-14 and zero-padded codes.
        assert_eq!(
            scan("zip", &many(&|i| format!("0{:04}-{:04}", 2000 + i, i))),
            vec![]
        );
        assert_eq!(
            scan("gtin", &many(&|i| format!("007{:011}", i * 7))),
            vec![]
        );
        assert_eq!(
            scan("account_no", &many(&|i| format!("{:010}", 10_000_000 + i))),
            vec![]
        );
        // Four-part versions in a version column.
        assert_eq!(
            scan(
                "assembly_version",
                &many(&|i| format!("{}.{}.0.0", i % 5, i % 9))
            ),
            vec![]
        );
        // Names of things.
        assert_eq!(scan("store_name", &many(&|i| format!("store-{i}"))), vec![]);
        assert_eq!(
            scan("name", &["feature_a".to_string(), "feature_b".to_string()]),
            vec![]
        );
        // Flags and counts about a kind.
        for name in [
            "is_mobile",
            "email_opened",
            "eid_holiday",
            "pan_angle",
            "is_birthday_month",
            "ship_address",
        ] {
            assert_eq!(kinds_by_name(name), vec![], "{name}");
        }
    }

    #[test]
    fn formats_people_write() {
        for ok in [
            "971501234567",
            "+971 (0) 50 123 4567",
            "+971-50-1234567",
            "(04) 123 4567",
            "0501234567",
            "0044 20 7946 0958",
        ] {
            assert!(is_phone(ok), "{ok}");
        }
        for bad in [
            "00712345678904",
            "0010000000",
            "023456789",
            "02134-1234",
            "0.23456789",
        ] {
            assert!(!is_phone(bad), "{bad}");
        }
        // A bare UAE mobile counts in a column named so.
        let mut s = ColumnScan::new("msisdn");
        for i in 0..100 {
            s.add(&format!("50{:07}", 1_000_000 + i));
        }
        assert_eq!(s.findings()[0].kind, PiiKind::Phone);
        assert!(is_iban("AE07-0331-2345-6789-0123-456"));
        assert!(is_iban("AL47212110090000000235698741"));
        for ok in [
            "192.168.001.010",
            "10.0.0.1:8080",
            "10.0.0.0/8",
            "[::1]:443",
            "fe80::1%eth0",
        ] {
            assert!(is_ip(ok), "{ok}");
        }
        for ok in ["user@example.xn--mgbaam7a8h", "Ünïcødé@example.com"] {
            assert!(is_email(ok), "{ok}");
        }
        assert!(!is_email("torch@2.0.cuda"));
        for ok in [
            "6759649826438453",
            "2200000000000004",
            "4000000000000000006",
        ] {
            assert!(is_payment_card(ok), "{ok}");
        }
        for ok in ["19900401", "01-Apr-1990", "1990-04-01T00:00:00"] {
            assert!(is_date_like(ok), "{ok}");
        }
        for ok in ["P1234567A", "C01X00T47", "12AB34567", "A1234567"] {
            assert!(is_passport_like(ok), "{ok}");
        }
        assert_eq!(words("IBANNumber"), vec!["iban", "number"]);
        assert_eq!(words("ipv4_address"), vec!["ipv", "4", "address"]);
        assert_eq!(kinds_by_name("EIDNumber"), vec![PiiKind::EmiratesId]);
        assert_eq!(kinds_by_name("birth_dt"), vec![PiiKind::DateOfBirth]);
        // Null-like tokens do not dilute a column.
        let mut s = ColumnScan::new("contact");
        for i in 0..45 {
            s.add(&format!("+971 50 123 {:04}", i));
        }
        for _ in 0..55 {
            s.add("NULL");
        }
        assert_eq!(s.findings()[0].kind, PiiKind::Phone);
    }
}
