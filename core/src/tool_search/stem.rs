//! The stemmer of the tool search: a small, conservative English suffix
//! stripper, so that a request and a tool's description need not use the same
//! form of a word.

use alloc::string::String;

use super::MAX_STEMMED;

/// Reduces a lower-case English word to a stem shared by its plural, verb and
/// some noun forms, so that a request and a description need not use the same
/// form of a word. Conservative, after Porter's steps 1 and 5 with a few of his
/// derivational ones (`-ation`, `-ate`, `-ion`, `-er` on long stems); words of
/// three letters or fewer or more than 32, or with anything but `a`-`z`, are
/// left alone. Stems need not be words: `create`, `creates`, `created`,
/// `creating` and `creation` all become `creat`.
pub fn stem(word: &mut String) {
    if word.len() <= 3 || word.len() > MAX_STEMMED || !word.bytes().all(|b| b.is_ascii_lowercase()) {
        return;
    }
    strip_plural(word);
    strip_verb_ending(word);
    strip_derivation(word);
    strip_final_e(word);
}

/// Whether `word` ends with `suffix`, compared byte by byte: suffixes are a few
/// bytes, too short to be worth a call to `memcmp`.
fn ends(word: &str, suffix: &str) -> bool {
    let (w, s) = (word.as_bytes(), suffix.as_bytes());
    w.len() >= s.len() && w.iter().rev().zip(s.iter().rev()).all(|(a, b)| a == b)
}

/// Whether the letter at `i` is a consonant: not `a`, `e`, `i`, `o`, `u`, and
/// not a `y` after a consonant (so runs of `y` alternate, first a consonant).
fn consonant(w: &[u8], i: usize) -> bool {
    if w[i] != b'y' {
        return !matches!(w[i], b'a' | b'e' | b'i' | b'o' | b'u');
    }
    let run = w[..=i].iter().rev().take_while(|&&b| b == b'y').count();
    let first = i + 1 - run;
    let first_consonant = first == 0 || !consonant(w, first - 1);
    first_consonant == (run % 2 == 1)
}

/// Each letter's [`consonant`]-ness, left to right, in one pass.
fn consonants(w: &[u8]) -> impl Iterator<Item = bool> + '_ {
    let mut prev_consonant = false;
    w.iter().enumerate().map(move |(i, &b)| {
        let c = match b {
            b'a' | b'e' | b'i' | b'o' | b'u' => false,
            b'y' => i == 0 || !prev_consonant,
            _ => true,
        };
        prev_consonant = c;
        c
    })
}

/// Porter's measure: how many vowel-consonant sequences the stem has.
fn measure(w: &[u8]) -> usize {
    let mut m = 0;
    let mut prev_vowel = false;
    for consonant in consonants(w) {
        if prev_vowel && consonant {
            m += 1;
        }
        prev_vowel = !consonant;
    }
    m
}

fn has_vowel(w: &[u8]) -> bool {
    consonants(w).any(|c| !c)
}

/// Ends consonant-vowel-consonant, the last not `w`, `x` or `y` (`hop`, `writ`):
/// a short stem that lost an `e` (`hope`, `write`).
fn ends_cvc(w: &[u8]) -> bool {
    let n = w.len();
    n >= 3
        && consonant(w, n - 3)
        && !consonant(w, n - 2)
        && consonant(w, n - 1)
        && !matches!(w[n - 1], b'w' | b'x' | b'y')
}

/// Ends in a doubled consonant (`runn`, `stopp`).
fn ends_double(w: &[u8]) -> bool {
    let n = w.len();
    n >= 2 && w[n - 1] == w[n - 2] && consonant(w, n - 1)
}

/// Replaces the last `cut` bytes of `word` with `with`.
fn replace_end(word: &mut String, cut: usize, with: &str) {
    word.truncate(word.len() - cut);
    word.push_str(with);
}

/// `-sses` → `-ss`, `-ies` → `-y`, `-s` → nothing (not `-ss`, `-us`, `-is`).
fn strip_plural(word: &mut String) {
    if ends(word, "sses") {
        word.truncate(word.len() - 2);
    } else if ends(word, "ies") {
        replace_end(word, 3, if word.len() > 4 { "y" } else { "ie" });
    } else if ends(word, "s") && !(ends(word, "ss") || ends(word, "us") || ends(word, "is")) {
        word.truncate(word.len() - 1);
    }
}

/// `-ed` and `-ing` off a stem with a vowel, then the stem mended: `-at`, `-bl`,
/// `-iz` and short consonant-vowel-consonant stems get their `e` back (`creat` →
/// `create`, `writ` → `write`), a doubled consonant is undoubled (`runn` → `run`).
fn strip_verb_ending(word: &mut String) {
    if ends(word, "eed") {
        if measure(&word.as_bytes()[..word.len() - 3]) > 0 {
            word.truncate(word.len() - 1);
        }
        return;
    }
    if ends(word, "ied") && word.len() > 4 {
        return replace_end(word, 3, "y");
    }
    let cut = if ends(word, "ing") {
        3
    } else if ends(word, "ed") {
        2
    } else {
        return;
    };
    if !has_vowel(&word.as_bytes()[..word.len() - cut]) {
        return;
    }
    word.truncate(word.len() - cut);
    let w = word.as_bytes();
    if ends(word, "at") || ends(word, "bl") || ends(word, "iz") {
        word.push('e');
    } else if ends_double(w) && !matches!(w[w.len() - 1], b'l' | b's' | b'z') {
        word.truncate(word.len() - 1);
    } else if measure(w) == 1 && ends_cvc(w) {
        word.push('e');
    }
}

/// `-ation` → `-ate` (`creation` → `create`), then `-ate`, `-ion` (after `s` or
/// `t`) or `-er` off a stem long enough to keep its meaning (`observation` →
/// `observ`, `connection` → `connect`, `converter` → `convert`; not `relate`,
/// `version`, `folder`, `server`).
fn strip_derivation(word: &mut String) {
    let long = |stem: &[u8]| measure(stem) > 1;
    if ends(word, "ation") && word.len() >= 8 && has_vowel(&word.as_bytes()[..word.len() - 5]) {
        replace_end(word, 5, "ate");
    }
    let n = word.len();
    let w = word.as_bytes();
    if (ends(word, "ate") || ends(word, "sion") || ends(word, "tion")) && long(&w[..n - 3]) {
        word.truncate(n - 3);
    } else if ends(word, "er") && long(&w[..n - 2]) {
        word.truncate(n - 2);
        let w = word.as_bytes();
        if ends_double(w) && !matches!(w[w.len() - 1], b'l' | b's' | b'z') {
            word.truncate(word.len() - 1);
        }
    }
}

/// A final `e` off a long stem, or a short one that would not read as a
/// different word without it (`image` → `imag`, `change` → `chang`; not `note`).
fn strip_final_e(word: &mut String) {
    if !ends(word, "e") {
        return;
    }
    let stem = &word.as_bytes()[..word.len() - 1];
    let m = measure(stem);
    if m > 1 || (m == 1 && !ends_cvc(stem)) {
        word.truncate(word.len() - 1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use alloc::vec;
    use alloc::vec::Vec;

    #[test]
    fn runs_of_y_alternate_consonant_and_vowel_without_recursion() {
        // As Porter has it: a `y` after a consonant is a vowel, and the reverse.
        assert!(consonant(b"yyy", 0) && !consonant(b"yyy", 1) && consonant(b"yyy", 2));
        assert!(!consonant(b"syzygy", 1) && consonant(b"toy", 2));
        assert_eq!(measure(b"yyyy"), 1);
        assert_eq!(consonants(b"yyyy").collect::<Vec<_>>(), vec![true, false, true, false]);
    }
}
