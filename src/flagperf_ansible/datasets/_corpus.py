"""Text for the generators: Python's own Zen (``this``) and a small English-German corpus.

Nothing is read from outside the interpreter: the Zen of Python ships in every Python as the
``this`` module (ROT13-encoded); the sentence pairs below were written for this project.
"""

from __future__ import annotations

import codecs
import contextlib
import io
import re

# Sentence pairs (English, German), line-aligned as in WMT14's news commentary and Europarl.
EN_DE = (
    ("The weather is fine today.", "Das Wetter ist heute schön."),
    ("We are meeting at the station at eight o'clock.", "Wir treffen uns um acht Uhr am Bahnhof."),
    ("The committee approved the report without changes.",
     "Der Ausschuss hat den Bericht ohne Änderungen angenommen."),
    ("Prices for energy rose again last month.",
     "Die Energiepreise sind im letzten Monat erneut gestiegen."),
    ("The train to Berlin is late.", "Der Zug nach Berlin hat Verspätung."),
    ("She reads a book every week.", "Sie liest jede Woche ein Buch."),
    ("Parliament will vote on the proposal tomorrow.",
     "Das Parlament wird morgen über den Vorschlag abstimmen."),
    ("The children are playing in the garden.", "Die Kinder spielen im Garten."),
    ("Our company opened a new office in Munich.",
     "Unser Unternehmen hat ein neues Büro in München eröffnet."),
    ("Can you help me with this task?", "Kannst du mir bei dieser Aufgabe helfen?"),
    ("The museum is closed on Mondays.", "Das Museum ist montags geschlossen."),
    ("Many people work from home now.", "Viele Menschen arbeiten jetzt von zu Hause aus."),
    ("The government announced new measures.", "Die Regierung hat neue Maßnahmen angekündigt."),
    ("I would like a cup of coffee, please.", "Ich hätte gern eine Tasse Kaffee, bitte."),
    ("The river flows through the old town.", "Der Fluss fließt durch die Altstadt."),
    ("He has lived in this city for ten years.", "Er wohnt seit zehn Jahren in dieser Stadt."),
    ("The results of the study were published.",
     "Die Ergebnisse der Studie wurden veröffentlicht."),
    ("We need more time for the discussion.", "Wir brauchen mehr Zeit für die Diskussion."),
    ("The bridge was built in the last century.",
     "Die Brücke wurde im letzten Jahrhundert gebaut."),
    ("Please close the window.", "Bitte schließ das Fenster."),
    ("The conference takes place in Vienna.", "Die Konferenz findet in Wien statt."),
    ("Exports to Asia have grown strongly.", "Die Exporte nach Asien sind stark gewachsen."),
    ("My sister studies medicine.", "Meine Schwester studiert Medizin."),
    ("The negotiations will continue next week.",
     "Die Verhandlungen werden nächste Woche fortgesetzt."),
    ("The shop opens at nine.", "Das Geschäft öffnet um neun."),
    ("Europe must invest in research.", "Europa muss in die Forschung investieren."),
    ("The dog sleeps under the table.", "Der Hund schläft unter dem Tisch."),
    ("This decision affects millions of citizens.",
     "Diese Entscheidung betrifft Millionen von Bürgern."),
    ("The road is closed because of snow.", "Die Straße ist wegen Schnee gesperrt."),
    ("Thank you for your answer.", "Vielen Dank für Ihre Antwort."),
)

# Moses-style tokens: words (with an inner apostrophe) and single punctuation marks.
_TOKEN = re.compile(r"\w+(?:'\w+)?|[^\w\s]")


def tokenize(line: str) -> list[str]:
    """``line`` split into words and punctuation marks, as Moses' tokenizer splits them."""
    return _TOKEN.findall(line)


def zen_lines() -> list[str]:
    """The 19 aphorisms of the Zen of Python (PEP 20), from the interpreter's ``this``."""
    with contextlib.redirect_stdout(io.StringIO()):  # importing it the first time prints it
        import this
    text = codecs.decode(this.s, "rot13")
    return [line for line in text.splitlines()[2:] if line.strip()]
