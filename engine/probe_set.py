"""The classroom probe set: the cloze sentences (three sections) and the true/false next-sentence pairs that
`engine.probes.probe_set_accuracy` scores and the Probe page lists. Data only."""

# The classroom probe set: fixed, small, lower-case, written for comparing models side by side (a tiny model
# pre-trained here, MiniLM continued-pre-trained with --init, any checkpoint). Each cloze item is (sentence with
# one [MASK], acceptable answers); an answer must be one WordPiece of the model's vocabulary to count (items
# whose answers are all missing from a vocabulary are skipped for that model, and said so). Three sections:
# everyday facts, English grammar (agreement, tense, prepositions, function words), and BBC-news-flavoured
# sentences (the domain of the classroom corpus).
CLOZE_SECTIONS = {
    "everyday facts": [
        ("the man went to the [MASK] to buy milk .", ("store", "shop", "supermarket", "market")),
        ("paris is the capital of [MASK] .", ("france",)),
        ("rome is the capital of [MASK] .", ("italy",)),
        ("there are seven days in a [MASK] .", ("week",)),
        ("there are twelve months in a [MASK] .", ("year",)),
        ("the sun rises in the [MASK] .", ("east", "morning")),
        ("she drank a cup of [MASK] .", ("tea", "coffee", "water")),
        ("he opened the [MASK] and walked into the room .", ("door", "window", "gate")),
        ("the children walk to [MASK] every morning .", ("school", "work", "church")),
        ("the opposite of hot is [MASK] .", ("cold",)),
        ("bees make [MASK] .", ("honey",)),
        ("two plus two equals [MASK] .", ("four",)),
        ("the sky is [MASK] on a clear day .", ("blue",)),
        ("cows give us [MASK] .", ("milk",)),
        ("an apple a day keeps the [MASK] away .", ("doctor",)),
        ("you need a key to open the [MASK] .", ("door", "lock", "box", "car")),
    ],
    "grammar": [
        ("the keys to the cabinet [MASK] on the table .", ("are", "were")),
        ("she [MASK] to school yesterday .", ("went", "walked", "came", "returned")),
        ("they have [MASK] their homework .", ("done", "finished", "completed")),
        ("he is taller [MASK] his brother .", ("than",)),
        ("i have lived here [MASK] ten years .", ("for",)),
        ("there [MASK] many people at the party last night .", ("were",)),
        ("the book was written [MASK] a famous author .", ("by",)),
        ("he [MASK] not like coffee .", ("does", "did")),
        ("we were tired , [MASK] we kept walking .", ("but", "yet")),
        ("the children [MASK] playing in the garden .", ("are", "were")),
        ("this is the house [MASK] i was born .", ("where",)),
        ("she is interested [MASK] music .", ("in",)),
        ("if it rains tomorrow , we [MASK] stay at home .", ("will", "would", "can", "should", "shall", "may", "might")),
        ("my brother and i [MASK] going to the cinema .", ("are", "were")),
        ("she has two cats and [MASK] dog .", ("a", "one")),
        ("he has been working here [MASK] 2010 .", ("since",)),
    ],
    "news": [
        ("the prime [MASK] said the government would cut taxes .", ("minister",)),
        ("shares in the firm fell sharply on the stock [MASK] .", ("market", "exchange")),
        ("the company reported a big rise in annual [MASK] .", ("profits", "profit", "sales", "revenue", "earnings")),
        ("oil [MASK] rose to a record high last week .", ("prices", "price")),
        ("the bank of [MASK] kept interest rates on hold .", ("england", "japan", "america")),
        ("the general [MASK] is expected to be held in may .", ("election",)),
        ("the chancellor will present his [MASK] to parliament .", ("budget", "plans", "report")),
        ("he scored the winning [MASK] in the second half .", ("goal", "try", "point", "points")),
        ("the film won the award for best [MASK] .", ("film", "actor", "actress", "director", "picture")),
        ("the band will release their new [MASK] next month .", ("album", "single", "record", "song")),
        ("mobile [MASK] users will be able to download music .", ("phone", "phones")),
        ("the world [MASK] is the biggest event in football .", ("cup",)),
        ("the police arrested a man in [MASK] with the attack .", ("connection",)),
        ("it is one of the most popular games in the [MASK] .", ("world", "country", "uk", "us")),
        ("the two countries signed a trade [MASK] .", ("deal", "agreement", "pact", "treaty")),
        ("the new software will run on personal [MASK] .", ("computers", "computer")),
    ],
}
CLOZE = [item for items in CLOZE_SECTIONS.values() for item in items]
CLOZE_SECTION_OF = {sentence: section for section, items in CLOZE_SECTIONS.items() for sentence, _ in items}

# (sentence A, sentence B, B really follows A): each A appears twice, once with its real continuation and once
# with a sentence from another topic (the NotNext of the paper's NSP task)
NSP_PAIRS = [
    ("the government announced plans to cut income tax .", "the chancellor said the change would help families on low incomes .", True),
    ("shares in the airline fell by ten percent on monday .", "the fall came after the firm warned that fuel costs would hit profits .", True),
    ("the striker scored twice in the first half .", "his second goal was a shot from thirty yards .", True),
    ("the band played their first concert in london last night .", "fans queued for hours to get tickets for the show .", True),
    ("the film opened in cinemas across the country on friday .", "it took more than ten million pounds in its first weekend .", True),
    ("the company launched a new mobile phone this week .", "the handset can play music and take photographs .", True),
    ("the man went to the store .", "he bought a gallon of milk .", True),
    ("it started to rain heavily in the afternoon .", "the match was stopped and the players left the pitch .", True),
    ("the minister resigned after a week of pressure .", "he said he had done nothing wrong but wanted to protect the party .", True),
    ("oil prices rose sharply in new york trading .", "analysts blamed fears about supplies from the middle east .", True),
    ("she forgot her umbrella at home .", "by the time she reached the office she was soaking wet .", True),
    ("the baby would not stop crying .", "her father picked her up and sang to her until she fell asleep .", True),
    ("we ran out of bread this morning .", "so i walked to the bakery on the corner to buy a loaf .", True),
    ("the old bridge was closed for repairs .", "drivers had to take a long detour through the town .", True),
    ("tom studied hard for the exam all week .", "he passed with the highest mark in his class .", True),
    ("the government announced plans to cut income tax .", "the singer said the album was her best work so far .", False),
    ("shares in the airline fell by ten percent on monday .", "the goalkeeper saved a penalty in the last minute .", False),
    ("the striker scored twice in the first half .", "the central bank kept interest rates at four percent .", False),
    ("the band played their first concert in london last night .", "the new tax rules will come into force in april .", False),
    ("the film opened in cinemas across the country on friday .", "penguins are flightless birds .", False),
    ("the company launched a new mobile phone this week .", "the election will be held on the fifth of may .", False),
    ("the man went to the store .", "penguins are flightless birds .", False),
    ("it started to rain heavily in the afternoon .", "the software giant reported record sales in asia .", False),
    ("the minister resigned after a week of pressure .", "the actor won an oscar for his role in the film .", False),
    ("oil prices rose sharply in new york trading .", "the children sang songs at the school concert .", False),
    ("she forgot her umbrella at home .", "the treaty was signed by both presidents in geneva .", False),
    ("the baby would not stop crying .", "the bank raised its profit forecast for the year .", False),
    ("we ran out of bread this morning .", "the museum owns three paintings by van gogh .", False),
    ("the old bridge was closed for repairs .", "my sister plays the violin in an orchestra .", False),
    ("tom studied hard for the exam all week .", "volcanoes can erupt without much warning .", False),
]

PROBE_SET = {"cloze": CLOZE, "nsp": NSP_PAIRS}
